"""Crash evidence and settling: when an incarnation crashed, why, and when that is counted (core).

``CrashBook`` holds the crash side of one unit's incarnations:

* **Evidence.** Each exception, failure line or systemd verdict is kept on its incarnation
  (bounded: the best candidates stay, whatever their arrival order). The root cause is chosen
  when asked (``causes.choose_root_cause``), so lines that arrive late still count.
* **Ending.** ``end`` closes an incarnation as crashed or stopped; a crash joins the
  *unsettled* list.
* **Settling.** A crash is *settled* into ``crashes_total`` once ``settle_seconds`` of log time
  (or of the daemon's clock, ``settle_due``) have passed since its latest end signal, with the
  cause known then. In journal mode an incarnation whose exit systemd has not confirmed yet
  waits ``_UNCONFIRMED_GRACE`` times longer. A crash whose process is still printing its
  traceback (header and frames seen, no exception line yet: the caller's ``held``) waits until
  the traceback completes, or ``hold_seconds`` after the end at most: a restart 70 s after a
  crash must not cut the root cause off.
* **Pending.** Until it settles, a crash whose best evidence is not a real failure (only a
  wrapper that points elsewhere, a consequence, a signal, or nothing) has the cause
  ``pending``: a wrapper is never published as the cause.
* **Late evidence** still refines the answer after a crash settled (``last_crash_info``, the
  replay verdict); ``crashes_total`` keeps the cause the crash was counted with.

Counting follows ``counting``: a crash whose end was seen while it was False (history the
daemon reported before) settles without adding to ``crashes_total``, unless the run that
reported that history saw the crash and had not counted it yet: such a crash is *carried*
(``counters.CarriedCrash``, restored by ``carry``) and counts when its end is read again, or
by ``settle_carried`` when the journal no longer holds it. ``recent`` keeps the last crashes
counted, each as it was when counted (one ``unit_crashed`` event each).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Final

from vllm_sentinel.engine.catalog.causes import (
    CrashCause,
    Evidence,
    EvidenceKind,
    choose_root_cause,
)
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.counters import CarriedCrash, micros
from vllm_sentinel.engine.incarnation import RECENT_EVENTS_KEPT, Incarnation
from vllm_sentinel.engine.snapshot import CrashInfo, EarlierIncarnations
from vllm_sentinel.engine.terminal_text import shortened

__all__ = ["CrashBook"]

_MAX_EVIDENCE: Final = 32
_MAX_MESSAGE: Final = 1000  # characters of a message kept (tracebacks cut theirs alike)
_POST_READY_CAUSE_WINDOW: Final = timedelta(minutes=5)
_UNCONFIRMED_GRACE: Final = 10  # × settle_seconds: how long a journal incarnation waits for systemd
_RECENT: Final = 16  # counted crashes kept for the Monitor's unit_crashed events


def _evidence_rank(item: Evidence) -> tuple[int, float, int]:
    return (int(item.kind), item.at.timestamp() if item.at else float("inf"), item.seq)


class CrashBook:
    """Evidence, ending and settling for the incarnations of one unit.

    Args:
        settle_seconds: log-time delay (seconds) before a crash is counted with its cause.
        hold_seconds: the longest (seconds after the end) a crash waits for a traceback that
            its process is still printing.

    Attributes:
        counting: while False, a crash that ends is settled without counting (history).
        crashes_total: settled, counted crashes by cause.
        last_evicted_crash: the root cause of the newest crashed incarnation the tracker
            forgot (so ``last_crash`` survives eviction).
    """

    def __init__(self, settle_seconds: float = 30.0, hold_seconds: float = 300.0) -> None:
        self._settle = timedelta(seconds=settle_seconds)
        self._hold = timedelta(seconds=max(hold_seconds, settle_seconds))
        self._seq = 0
        self.unsettled: list[Incarnation] = []
        self.counting = True
        self.crashes_total: Counter[CrashCause] = Counter()
        self.last_evicted_crash: CrashInfo | None = None
        self.recent_crashes: deque[datetime] = deque(maxlen=RECENT_EVENTS_KEPT)  # history too
        self.recent: deque[CrashInfo] = deque(maxlen=_RECENT)  # counted, as counted
        self._carried: dict[str, CarriedCrash] = {}
        # the incarnations forgotten (``forget``), summed up: how many, how each ended, when
        self._earlier_count = 0
        self._earlier_by: Counter[str] = Counter()
        self._earlier_first: datetime | None = None
        self._earlier_last: datetime | None = None

    # --- evidence ------------------------------------------------------------------------

    def add_evidence(
        self,
        incarnation: Incarnation,
        cause: CrashCause,
        kind: EvidenceKind,
        exception: str,
        message: str,
        time: datetime | None,
        *,
        pid: int | None = None,
        survivable: bool = False,
    ) -> Evidence:
        """Keep one reason ``incarnation`` may have crashed (message cut to 1,000 chars, a cut
        ending with ``…``).

        ``pid`` and ``survivable``: a process's own line (see ``survived``).
        """
        self._seq += 1
        evidence = incarnation.evidence
        message = shortened(message, _MAX_MESSAGE)
        item = Evidence(cause, kind, exception, message, time, self._seq, pid, survivable)
        evidence.append(item)
        if len(evidence) > _MAX_EVIDENCE:
            # keep the best candidates (most direct kind, earliest), whatever their arrival order
            evidence.remove(max(evidence, key=_evidence_rank))
        return item

    @staticmethod
    def supersede_lines(incarnation: Incarnation, exception: Evidence) -> None:
        """The exception an ERROR line stated arrived: the line (same cause, no class) is no
        longer evidence; the exception says it with its class."""
        evidence = incarnation.evidence
        evidence[:] = [
            item
            for item in evidence
            if item is exception
            or item.exception
            or not item.survivable
            or item.cause is not exception.cause
        ]

    @staticmethod
    def survived(incarnation: Incarnation, pid: int | None) -> bool:
        """Process ``pid`` made progress: what it printed before did not end it.

        Its survivable evidence so far (and that of lines whose process is unknown, such as
        bare exception lines a library printed at import) becomes ``NOISE``: still shown when
        nothing else is known, never chosen over a failure that came later. True when some
        evidence changed.
        """
        evidence = incarnation.evidence
        changed = False
        for index, item in enumerate(evidence):
            if (
                item.survivable
                and item.kind is not EvidenceKind.NOISE
                and (item.pid is None or item.pid == pid)
            ):
                evidence[index] = replace(item, kind=EvidenceKind.NOISE, survivable=False)
                changed = True
        return changed

    # --- ending --------------------------------------------------------------------------

    def end_cleanly(self, incarnation: Incarnation, time: datetime | None) -> None:
        """A stop: crashed if a failure was pending and no stop was asked, else stopped."""
        if incarnation.fatal_pending and not incarnation.stop_requested:
            self.end(incarnation, Outcome.CRASHED, time)
        else:
            self.end(incarnation, Outcome.STOPPED, time)

    def end(self, incarnation: Incarnation, outcome: Outcome, time: datetime | None) -> None:
        """End ``incarnation`` with ``outcome`` at ``time``; each end signal restarts settling.

        An incarnation that already stopped by its own log (not by systemd) becomes crashed
        when a failure verdict follows.
        """
        if time is not None and (incarnation.settle_from is None or time > incarnation.settle_from):
            incarnation.settle_from = time  # each end signal restarts the settle window
        if incarnation.ended:
            if (
                outcome is Outcome.CRASHED
                and incarnation.outcome is Outcome.STOPPED
                and not incarnation.stop_by_manager
            ):
                # systemd says the process failed after its log looked like a clean stop
                incarnation.reopen_as_crashed()
                incarnation.counted = self._counts(incarnation)
                self.unsettled.append(incarnation)
            return
        incarnation.close(outcome, time)
        if outcome is Outcome.CRASHED:
            incarnation.counted = self._counts(incarnation)
            self.unsettled.append(incarnation)

    # --- carried across restarts of the daemon -----------------------------------------------

    @staticmethod
    def _key(incarnation: Incarnation) -> str | None:
        if incarnation.id is not None:
            return incarnation.id
        ended = incarnation.ended_at
        return f"t:{micros(ended)}" if ended is not None else None

    def _counts(self, incarnation: Incarnation) -> bool:
        """Whether a crash that just ended will count: read while counting, or carried."""
        key = self._key(incarnation)
        carried = key is not None and self._carried.pop(key, None) is not None
        return self.counting or carried

    def carry(self, crashes: Iterable[CarriedCrash]) -> None:
        """Crashes a previous run applied without counting them yet: count each when its end
        is read again (even as history)."""
        self._carried = {crash.key: crash for crash in crashes}

    def carried(self) -> tuple[CarriedCrash, ...]:
        """The crashes that will count but are not counted yet: applied and unsettled, and
        carried ones not read again."""
        applied = []
        for incarnation in self.unsettled:
            key = self._key(incarnation)
            if incarnation.counted and not incarnation.settled and key is not None:
                # carried with the cause it would settle with now (a bare signal: killed),
                # not pending: the journal may no longer hold its evidence next run
                crash = self.crash_info(incarnation, as_settled=True)
                applied.append(
                    CarriedCrash(
                        key, incarnation.started_at, incarnation.ended_at, crash.cause, crash.phase
                    )
                )
        return (*applied, *self._carried.values())

    def settle_carried(self) -> int:
        """Count the carried crashes that were not read again (the journal no longer holds
        them) with the cause known when they were saved (``unknown`` for ``pending``)."""
        carried, self._carried = list(self._carried.values()), {}
        for crash in carried:
            cause = CrashCause.UNKNOWN if crash.cause is CrashCause.PENDING else crash.cause
            self.crashes_total[cause] += 1
            key = None if crash.key.startswith("t:") else crash.key
            self.recent.append(CrashInfo(cause, "", "", crash.phase, crash.ended_at, key))
        return len(carried)

    # --- settling ------------------------------------------------------------------------

    def settle_due(
        self, now: datetime | None, held: Callable[[Incarnation], bool] | None = None
    ) -> bool:
        """Settle every crash whose wait has passed at ``now``; True when one settled.

        Args:
            now: log time (while feeding) or the daemon's clock (on its tick), UTC.
            held: says whether an incarnation's process is still printing a traceback; such
                a crash waits up to ``hold_seconds`` after its end.
        """
        if not self.unsettled or now is None:
            return False
        settled = False
        for incarnation in list(self.unsettled):
            ended = incarnation.settle_from or incarnation.ended_at
            wait = self._settle
            if incarnation.id is not None and not incarnation.confirmed:
                # journal mode: the exit record is still to come, and late lines with it
                wait = self._settle * _UNCONFIRMED_GRACE
            if ended is not None:
                waited = now - ended
                if waited < wait or (
                    waited < self._hold and held is not None and held(incarnation)
                ):
                    continue
            self.settle_one(incarnation)
            self.unsettled.remove(incarnation)
            settled = True
        return settled

    def settle_all(self) -> None:
        """Settle every crash now (end of input, or an incarnation forgotten)."""
        for incarnation in self.unsettled:
            self.settle_one(incarnation)
        self.unsettled.clear()

    def settle_one(self, incarnation: Incarnation) -> None:
        """Settle one crash: count it with the cause known now, once."""
        if incarnation.settled:
            return
        incarnation.settled = True
        if incarnation.ended_at is not None:
            self.recent_crashes.append(incarnation.ended_at)
        if incarnation.counted:
            crash = self.crash_info(incarnation)
            self.crashes_total[crash.cause] += 1
            self.recent.append(crash)

    def forget(self, incarnation: Incarnation) -> None:
        """The tracker drops ``incarnation``: settle it now and keep its crash as the last."""
        if incarnation in self.unsettled:
            self.settle_one(incarnation)
            self.unsettled.remove(incarnation)
        if incarnation.outcome is Outcome.CRASHED:
            self.last_evicted_crash = crash = self.crash_info(incarnation)
            self._earlier_by[crash.cause.value] += 1
        else:
            self._earlier_by[incarnation.outcome.value] += 1
        self._earlier_count += 1
        started, ended = incarnation.started_at, incarnation.ended_at
        if started is not None and (self._earlier_first is None or started < self._earlier_first):
            self._earlier_first = started
        if ended is not None and (self._earlier_last is None or ended > self._earlier_last):
            self._earlier_last = ended

    def earlier(self) -> EarlierIncarnations:
        """The forgotten incarnations, summed up (most frequent outcome first)."""
        if not self._earlier_count:
            return EarlierIncarnations()
        by_outcome = dict(sorted(self._earlier_by.items(), key=lambda item: (-item[1], item[0])))
        return EarlierIncarnations(
            self._earlier_count, by_outcome, self._earlier_first, self._earlier_last
        )

    def unsettled_since(self) -> datetime | None:
        """When the earliest crash that will count but is not counted yet ended (UTC)."""
        ends = [i.ended_at for i in self.unsettled if i.counted and i.ended_at is not None]
        return min(ends) if ends else None

    # --- the answer ----------------------------------------------------------------------

    def crash_info(self, incarnation: Incarnation, *, as_settled: bool = False) -> CrashInfo:
        """The root cause of ``incarnation``'s crash from the evidence known now.

        ``pending`` while the crash is unsettled and no real failure was seen (unless
        ``as_settled``: the cause it would be counted with now). After ``ready``,
        only evidence from the last five minutes before the end counts: an error an hour
        earlier (a request's, a handled one) did not kill the process.
        """
        evidence: Iterable[Evidence] = incarnation.evidence
        ended = incarnation.ended_at
        if incarnation.furthest is Phase.READY and ended is not None:
            evidence = [
                item
                for item in incarnation.evidence
                if item.at is None or ended - item.at <= _POST_READY_CAUSE_WINDOW
            ]
        root = choose_root_cause(evidence)
        phase = incarnation.crash_phase or incarnation.phase
        if not (incarnation.settled or as_settled) and (
            root is None or root.kind is not EvidenceKind.REAL
        ):
            return CrashInfo(CrashCause.PENDING, "", "", phase, ended, incarnation.id)
        if root is None:
            return CrashInfo(CrashCause.UNKNOWN, "", "", phase, ended, incarnation.id)
        return CrashInfo(root.cause, root.exception, root.message, phase, ended, incarnation.id)
