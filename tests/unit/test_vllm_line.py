"""vLLM line anatomy: prefixes, headers in both eras, tqdm and ANSI."""

from __future__ import annotations

import json
import re

import pytest

from vllm_sentinel.engine.decode.vllm_line import (
    LineKind,
    Role,
    collapse_carriage_returns,
    parse_line,
)


@pytest.mark.parametrize(
    ("prefix", "role", "rank", "pid"),
    [
        ("(VllmWorkerProcess pid=3897243)", Role.WORKER, None, 3897243),
        ("(RayWorkerWrapper pid=51, ip=10.0.0.7)", Role.WORKER, None, 51),
        ("(VllmWorker rank=1 pid=2445156)", Role.WORKER, 1, 2445156),
        ("(VllmWorker TP0 pid=12)", Role.WORKER, 0, 12),
        ("(EngineCore_0 pid=1179302)", Role.ENGINE_CORE, None, 1179302),
        ("(EngineCore_DP0 pid=17374)", Role.ENGINE_CORE, None, 17374),
        ("(APIServer pid=1)", Role.API_SERVER, None, 1),
        ("(Worker_TP7 pid=221350)", Role.WORKER, 7, 221350),
        ("(Worker_DP0_TP5_EP5 pid=88)", Role.WORKER, 5, 88),
        ("(EngineCore pid=23397)", Role.ENGINE_CORE, None, 23397),
        ("(LLMRayActor pid=20770)", Role.OTHER, None, 20770),
    ],
)
def test_process_prefix(prefix: str, role: Role, rank: int | None, pid: int) -> None:
    """Every prefix vLLM (and Ray) adds gives role, tensor-parallel rank and PID."""
    anatomy = parse_line(f"{prefix} INFO 11-20 10:00:09 [pynccl.py:103] vLLM is using nccl==2.27.3")
    assert (anatomy.role, anatomy.rank, anatomy.pid) == (role, rank, pid)
    assert anatomy.body == "vLLM is using nccl==2.27.3"


class TestHeader:
    """Both header eras and the other line shapes."""

    def test_old_era_header(self) -> None:
        """Up to 0.7.3: ``file.py:70]`` without the opening bracket."""
        anatomy = parse_line("INFO 01-11 15:51:02 llm_engine.py:70] Initializing an LLM engine")
        assert (anatomy.kind, anatomy.level, anatomy.stamp, anatomy.source) == (
            LineKind.VLLM,
            "INFO",
            "01-11 15:51:02",
            "llm_engine.py:70",
        )
        assert anatomy.body == "Initializing an LLM engine"

    def test_new_era_header(self) -> None:
        """From 0.8.0: ``[launcher.py:36]``."""
        anatomy = parse_line("INFO 04-23 14:49:33 [launcher.py:36] Route: /load, Methods: GET")
        assert anatomy.source == "launcher.py:36" and anatomy.body == "Route: /load, Methods: GET"

    def test_ansi_coloured_worker_prefix(self) -> None:
        """Up to 0.11 the worker prefix is always cyan: colour is removed first."""
        anatomy = parse_line(
            "\x1b[1;36m(VllmWorkerProcess pid=5)\x1b[0;0m ERROR 10-03 18:29:17 x.py:1] boom"
        )
        assert (anatomy.pid, anatomy.level, anatomy.body) == (5, "ERROR", "boom")

    def test_uvicorn_line(self) -> None:
        """uvicorn's ``INFO:     `` formatter."""
        anatomy = parse_line("(APIServer pid=1) INFO:     Application startup complete.")
        assert (anatomy.kind, anatomy.level, anatomy.body) == (
            LineKind.UVICORN,
            "INFO",
            "Application startup complete.",
        )

    @pytest.mark.parametrize(
        "tail",
        ["     GET /health", "\tx", "\u00a0\u2003x", " ", "x", ":x", "", "\x0bx", "  \x1c x"],
    )
    @pytest.mark.parametrize("level", ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"])
    def test_uvicorn_head_is_level_colon_and_whitespace(self, level: str, tail: str) -> None:
        """A uvicorn line is ``LEVEL:`` then one or more of what regex ``\\s`` matches (read
        without a regex: the same result as ``LEVEL:\\s+`` for every kind of blank)."""
        line = f"{level}:{tail}"
        expected = re.match(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+", line)
        anatomy = parse_line(line)
        if expected is None:
            assert anatomy.kind is LineKind.RAW and anatomy.body == line
        else:
            assert (anatomy.kind, anatomy.level, anatomy.body) == (
                LineKind.UVICORN,
                level,
                line[expected.end() :],
            )

    def test_json_formatter(self) -> None:
        """vLLM 0.32+ JSON logging, with exc_info appended to the body."""
        anatomy = parse_line(
            '{"asctime": "2026-05-01 10:00:00,123", "levelname": "ERROR", "name": "vllm", '
            '"processName": "Worker_TP3", "process": 77, "message": "WorkerProc failed to start.",'
            ' "exc_info": "Traceback (most recent call last):\\nRuntimeError: x"}'
        )
        assert (anatomy.kind, anatomy.level, anatomy.role, anatomy.rank, anatomy.pid) == (
            LineKind.JSON,
            "ERROR",
            Role.WORKER,
            3,
            77,
        )
        assert anatomy.body.splitlines() == [
            "WorkerProc failed to start.",
            "Traceback (most recent call last):",
            "RuntimeError: x",
        ]
        assert anatomy.stamp == "2026-05-01 10:00:00,123"

    @pytest.mark.parametrize(
        ("asctime", "stamp"),
        [
            ("05-01 10:00:00", "05-01 10:00:00"),  # vLLM's date format, as in the text header
            ("05-01 10:00:00,123", "05-01 10:00:00"),
            ("2026-05-01T10:00:00+02:00", "2026-05-01T10:00:00+02:00"),
            ("10:00:00", None),
            ("yesterday at ten", None),
            (1777629600, None),
        ],
    )
    def test_json_asctime_is_the_stamp(self, asctime: object, stamp: str | None) -> None:
        """``asctime`` becomes the stamp: without a year like the header, or a full date."""
        line = json.dumps({"asctime": asctime, "levelname": "INFO", "message": "m"})
        assert parse_line(line).stamp == stamp

    def test_foreign_lines_pass_through(self) -> None:
        """NCCL, Ray and Python warnings come back untouched as raw lines."""
        for line in (
            "2024-05-25 15:30:00,678 INFO worker.py:1749 -- Started a local Ray instance.",
            "host1:12:12 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
            "/usr/lib/python3/x.py:26: UserWarning: pkg_resources is deprecated",
        ):
            anatomy = parse_line(line)
            assert anatomy.kind is LineKind.RAW and anatomy.body == line


class TestCarriageReturns:
    """tqdm refreshes and NewLineFormatter's trailing ``\\r``."""

    def test_last_refresh_wins_and_prefix_is_kept(self) -> None:
        """A bar refreshed on one physical line keeps the worker prefix of its start."""
        line = "(Worker_TP0 pid=529) \rLoading x:   0% Completed | 0/5\rLoading x:  20% Completed | 1/5"
        assert (
            collapse_carriage_returns(line)
            == "(Worker_TP0 pid=529) Loading x:  20% Completed | 1/5"
        )

    def test_trailing_carriage_return_is_dropped(self) -> None:
        """All but the last physical line of a multi-line message end in ``\\r``."""
        assert collapse_carriage_returns("INFO 01-01 00:00:00 [a.py:1] logo line\r") == (
            "INFO 01-01 00:00:00 [a.py:1] logo line"
        )

    def test_padding_before_carriage_return(self) -> None:
        """tqdm may pad a shorter refresh with blanks before the next ``\\r``."""
        assert (
            collapse_carriage_returns("    \rCapturing CUDA graphs: 100%")
            == "Capturing CUDA graphs: 100%"
        )

    def test_a_carriage_return_inside_a_line_that_is_no_bar_keeps_its_head(self) -> None:
        """Only a progress bar's redraw collapses; elsewhere ``\\r`` reads as a space."""
        line = "ValueError: Invalid repository ID: '/models/x\rOWNED'."
        assert (
            collapse_carriage_returns(line)
            == "ValueError: Invalid repository ID: '/models/x OWNED'."
        )
        prefixed = "(APIServer pid=1) \rERROR 01-01 00:00:00 [a.py:1] boom\rtail"
        assert collapse_carriage_returns(prefixed) == (
            "(APIServer pid=1) ERROR 01-01 00:00:00 [a.py:1] boom tail"
        )

    def test_a_bar_redrawn_over_a_log_line_still_collapses(self) -> None:
        """A bar's redraw keeps the last refresh, whatever came before it."""
        line = "INFO 01-01 00:00:00 [a.py:1] x\rProcessed prompts:  50%|█    | 1/2 [00:01<00:01]"
        assert collapse_carriage_returns(line) == (
            "Processed prompts:  50%|█    | 1/2 [00:01<00:01]"
        )

    def test_the_exception_line_with_a_carriage_return_keeps_its_cause(self) -> None:
        """The trial's repro: ANSI and ``\\r`` inside a hostile path, cause model_not_found."""
        from vllm_sentinel.replay import replay

        lines = [
            "Traceback (most recent call last):",
            '  File "/x/vllm/transformers_utils/config.py", line 1, in get_config',
            "ValueError: Invalid repository ID or local directory specified: "
            "'/models/\x1b[2J\u2026\rOWNED'.",
        ]
        text = "".join(line + "\n" for line in lines).encode()
        (unit,) = replay([[text]]).units
        crash = unit.incarnations[-1].crash
        assert crash is not None
        assert (crash.cause.value, crash.exception) == ("model_not_found", "ValueError")


class TestTorchRankPrefix:
    """torch.distributed (2.2+) prefixes a rank's stderr lines with ``[rankN]:``: a wrapper.

    The line beneath is read as if unprefixed (fresh set class B); lines from the shared
    corpus's ``[rank0]:[W… ProcessGroupNCCL.cpp:…]`` warnings and the traceback shape vLLM
    issues show under torch 2.4+.
    """

    @pytest.mark.parametrize(
        ("line", "body"),
        [
            ("[rank0]: Traceback (most recent call last):", "Traceback (most recent call last):"),
            (
                '[rank3]:   File "/usr/lib/python3/dist-packages/vllm/worker/worker.py", line 9',
                '  File "/usr/lib/python3/dist-packages/vllm/worker/worker.py", line 9',
            ),
            (
                "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            ),
            (
                "[rank0]:[W222 06:35:27.321548260 ProcessGroupNCCL.cpp:1524] Warning: WARNING: "
                "destroy_process_group() was not called before program exit",
                "[W222 06:35:27.321548260 ProcessGroupNCCL.cpp:1524] Warning: WARNING: "
                "destroy_process_group() was not called before program exit",
            ),
            ("[rank12]: SystemExit: 15", "SystemExit: 15"),
        ],
    )
    def test_the_prefix_is_stripped(self, line: str, body: str) -> None:
        parsed = parse_line(line)
        assert (parsed.body, parsed.kind) == (body, LineKind.RAW)

    def test_after_vllms_process_prefix(self) -> None:
        parsed = parse_line("(VllmWorkerProcess pid=4242) [rank1]: RuntimeError: NCCL error")
        assert (parsed.body, parsed.pid, parsed.role) == (
            "RuntimeError: NCCL error",
            4242,
            Role.WORKER,
        )

    @pytest.mark.parametrize(
        "line",
        ["[rank0] training step 5", "[ranking]: top-5", "rank0]: KeyboardInterrupt"],
    )
    def test_other_brackets_are_kept(self, line: str) -> None:
        assert parse_line(line).body == line
