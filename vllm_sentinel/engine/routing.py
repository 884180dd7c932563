"""Which incarnation a record belongs to: the unit's incarnations and attribution (core: pure).

``Incarnations`` keeps the last few incarnations of one unit, oldest first (the last one is
*current*), and answers one question for every record: whose is it?

* A record with a systemd invocation id belongs to that invocation's incarnation (new ones
  start there; a pristine current incarnation without an id adopts it).
* Without one (plain text), it belongs to the incarnation that owns its PID if that is an older
  one, else to the current one. A version banner or systemd's ``Started`` starts a new
  incarnation; a banner also frees the PIDs older incarnations own (``release_pids``: a
  restarted container reuses them).

* Whatever its invocation id, a record on a journald stream (``_STREAM_ID``) first seen in an
  older incarnation belongs to that one (``on_stream``). systemd opens a new stdout stream for
  each start; a process left over from an earlier start (``KillMode=process``: the dead
  worker still printing its traceback) writes on the stream it inherited, but journald stamps
  its lines with the invocation id the unit's cgroup has *now*, the new one. Streams are never
  reused (random ids), so a new start's processes, even with PIDs a container or a reboot
  reused, never go back to an old incarnation.

So a dead worker's traceback that journald delivers after the restart only ever touches the
dead incarnation. Starting a new incarnation *supersedes* the current one: an unfinished one
ends (crashed, unless a stop was asked), with ``crash.CrashBook`` deciding the rest.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
from typing import Final

from vllm_sentinel.engine.catalog.causes import CrashCause, EvidenceKind
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.crash import CrashBook
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.incarnation import RECENT_EVENTS_KEPT, Incarnation
from vllm_sentinel.engine.snapshot import PhaseEntry

__all__ = ["Incarnations"]

_MAX_PIDS: Final = 64
_MAX_STREAMS: Final = 16  # per incarnation kept: the main process's, ExecStartPre=/Post= ones


class Incarnations:
    """The incarnations of one unit, and the attribution of records to them.

    Args:
        crashes: the unit's crash book (superseded and forgotten incarnations end there).
        max_incarnations: how many to keep (older ones are forgotten; their counts stay in
            the counters).

    Attributes:
        items: the incarnations kept, oldest first.
        by_id: invocation id → incarnation.
        pid_owner: PID → the incarnation that owns it.
        stream_owner: journald stream id → the incarnation it was first seen in.
        counting: while False, new incarnations do not count into ``starts_total``.
        starts_total: incarnations started while counting.
    """

    def __init__(self, crashes: CrashBook, max_incarnations: int = 8) -> None:
        self._crashes = crashes
        self._max = max(2, max_incarnations)
        self._serial = 0
        self.items: deque[Incarnation] = deque()
        self.by_id: dict[str, Incarnation] = {}
        self.pid_owner: dict[int, Incarnation] = {}
        self.stream_owner: dict[str, Incarnation] = {}
        self.counting = True
        self.starts_total = 0
        self.recent_starts: deque[datetime] = deque(maxlen=RECENT_EVENTS_KEPT)  # history too

    def current(self) -> Incarnation | None:
        """The newest incarnation, or ``None`` before the first record."""
        return self.items[-1] if self.items else None

    def attribute(
        self, record: Record, pid: int | None, time: datetime | None, midway: bool = True
    ) -> Incarnation:
        """The incarnation ``record`` belongs to, started if new.

        Args:
            record: the record (its invocation id decides first).
            pid: the writing process (vLLM's prefix, else the journal's).
            time: the record's time, for a new incarnation's start.
            midway: the record is not systemd's ``Started`` (the first incarnation a tracker
                meets midway began before what it reads, and does not count as a start).
        """
        invocation_id = record.invocation_id
        if invocation_id is not None:
            incarnation = self.by_id.get(invocation_id)
            if incarnation is None:
                current = self.current()
                if current is not None and current.id is None and current.pristine:
                    current.id = invocation_id
                    self.by_id[invocation_id] = current
                    return current
                # The first incarnation a tracker meets midway began before what it reads: a
                # restarted daemon resuming at its cursor saw (and counted) its start already.
                counted = not midway or bool(self.items)
                incarnation = self.start(invocation_id, time, counted)
            return incarnation
        current = self.current()
        if current is None:
            return self.start(None, time)
        if pid is not None and pid not in current.pids:
            owner = self.pid_owner.get(pid)
            if owner is not None and owner is not current:
                return owner
        return current

    def on_stream(self, stream: str, incarnation: Incarnation) -> Incarnation:
        """The incarnation a record on journald stream ``stream`` belongs to, given the one
        its invocation id (or PID) named.

        A stream first seen in an older incarnation is that one's (a left-over process writes
        on the stream of the start that spawned it); a stream seen first is ``incarnation``'s
        from now on (at most ``_MAX_STREAMS`` per kept incarnation are remembered).
        """
        owners = self.stream_owner
        owner = owners.get(stream)
        if owner is None:
            if len(owners) < _MAX_STREAMS * self._max:
                owners[stream] = incarnation
            return incarnation
        if owner is not incarnation and owner.serial < incarnation.serial:
            return owner
        return incarnation

    def start(
        self, invocation_id: str | None, time: datetime | None, counted: bool = True
    ) -> Incarnation:
        """Begin a new incarnation (superseding the current one) and return it."""
        previous = self.current()
        if previous is not None:
            self.supersede(previous)
        self._serial += 1
        incarnation = Incarnation(self._serial, invocation_id, time)
        incarnation.timeline.append(PhaseEntry(Phase.STARTING, time))
        self.items.append(incarnation)
        if invocation_id is not None:
            self.by_id[invocation_id] = incarnation
        if self.counting and counted:
            self.starts_total += 1
        if time is not None:
            self.recent_starts.append(time)  # "starts in the last 24 h" include history
        while len(self.items) > self._max:
            self._evict(self.items.popleft())
        return incarnation

    def supersede(self, previous: Incarnation) -> None:
        """End an incarnation that a reboot or a newer incarnation replaced."""
        previous.confirmed = True
        if previous.ended:
            return
        crashes = self._crashes
        if previous.fatal_pending:
            crashes.end(previous, Outcome.CRASHED, previous.last_record_at)
        elif previous.stop_requested:
            crashes.end(previous, Outcome.STOPPED, previous.last_record_at)
        else:
            crashes.add_evidence(
                previous,
                CrashCause.UNKNOWN,
                EvidenceKind.SIGNAL,
                "",
                "ended without an exit record (superseded)",
                previous.last_record_at,
            )
            crashes.end(previous, Outcome.CRASHED, previous.last_record_at)

    def release_pids(self, keeper: Incarnation) -> None:
        """Give up the PIDs older incarnations own: a text banner began ``keeper``.

        A restarted container reuses its PIDs (``pid=1``, the same engine PID): from now on
        their lines belong to the new process, not to the dead incarnation that owned them.
        """
        owners = self.pid_owner
        for incarnation in self.items:
            if incarnation is keeper:
                continue
            for pid in incarnation.pids:
                if owners.get(pid) is incarnation:
                    del owners[pid]

    def claim_pid(self, incarnation: Incarnation, pid: int) -> None:
        """Record that ``pid`` logged for ``incarnation`` (at most ``_MAX_PIDS`` kept)."""
        if pid in incarnation.pids:
            return
        if len(incarnation.pids) < _MAX_PIDS:
            incarnation.pids[pid] = None
            self.pid_owner[pid] = incarnation
        else:  # not kept: owning it here would outlive the incarnation's eviction (a leak)
            self.pid_owner.pop(pid, None)

    def _evict(self, incarnation: Incarnation) -> None:
        if incarnation.id is not None:
            self.by_id.pop(incarnation.id, None)
        for pid in incarnation.pids:
            if self.pid_owner.get(pid) is incarnation:
                del self.pid_owner[pid]
        streams = self.stream_owner
        for stream in [key for key, owner in streams.items() if owner is incarnation]:
            del streams[stream]
        self._crashes.forget(incarnation)
