"""Tests for vllm_sentinel.sources.nvidia_smi: nvidia-smi CSV → devices and processes."""

from __future__ import annotations

from vllm_sentinel.engine.snapshot import GpuDevice, GpuProcess
from vllm_sentinel.sources.nvidia_smi import (
    MIB,
    QUERY_APPS_ARGV,
    QUERY_GPUS_ARGV,
    SmiStreamDecoder,
    parse_compute_apps,
    parse_gpus,
    stream_argv,
)

H200_UUIDS = [
    "GPU-8d1d4a5c-7f36-2e1b-94b8-3a6f0c2e5d11",
    "GPU-1f0e7b2a-93c4-5d6e-a7b8-c9d0e1f2a3b4",
    "GPU-2a3b4c5d-6e7f-8091-a2b3-c4d5e6f70819",
    "GPU-3b4c5d6e-7f80-91a2-b3c4-d5e6f708192a",
    "GPU-4c5d6e7f-8091-a2b3-c4d5-e6f708192a3b",
    "GPU-5d6e7f80-91a2-b3c4-d5e6-f708192a3b4c",
    "GPU-6e7f8091-a2b3-c4d5-e6f7-08192a3b4c5d",
    "GPU-7f8091a2-b3c4-d5e6-f708-192a3b4c5d6e",
]

# 8×H200 while vLLM (TP=8) holds ~95 GiB per GPU: the format of
# nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total --format=csv,noheader,nounits
EIGHT_H200 = "".join(
    f"{index}, {uuid}, NVIDIA H200, {97612 + index}, 143771\n"
    for index, uuid in enumerate(H200_UUIDS)
)

EIGHT_B200 = (
    "0, GPU-b2000000-0000-0000-0000-000000000000, NVIDIA B200, 0, 183359\n"
    "1, GPU-b2000000-0000-0000-0000-000000000001, NVIDIA B200, 1, 183359\n"
    "2, GPU-b2000000-0000-0000-0000-000000000002, NVIDIA B200, 4, 183359\n"
    "3, GPU-b2000000-0000-0000-0000-000000000003, NVIDIA B200, 180224, 183359\n"
    "4, GPU-b2000000-0000-0000-0000-000000000004, NVIDIA B200, 180224, 183359\n"
    "5, GPU-b2000000-0000-0000-0000-000000000005, NVIDIA B200, 180224, 183359\n"
    "6, GPU-b2000000-0000-0000-0000-000000000006, NVIDIA B200, 180224, 183359\n"
    "7, GPU-b2000000-0000-0000-0000-000000000007, NVIDIA B200, 180224, 183359\n"
)

# nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits:
# one vLLM API server with 8 TP workers, one row per (process, GPU).
EIGHT_H200_APPS = "".join(
    f"{uuid}, {4121 + index}, 97102\n" for index, uuid in enumerate(H200_UUIDS)
)


class TestArgv:
    def test_gpu_query_asks_for_the_parsed_fields_without_header_or_units(self) -> None:
        """The GPU query names the five fields in parse order, CSV without header/units."""
        assert QUERY_GPUS_ARGV == (
            "nvidia-smi",
            "--query-gpu=index,uuid,name,memory.used,memory.total",
            "--format=csv,noheader,nounits",
        )

    def test_apps_query_asks_for_uuid_pid_and_memory(self) -> None:
        """The compute-apps query names gpu_uuid, pid, used_memory, CSV without header/units."""
        assert QUERY_APPS_ARGV == (
            "nvidia-smi",
            "--query-compute-apps=gpu_uuid,pid,used_memory",
            "--format=csv,noheader,nounits",
        )


class TestParseGpus:
    def test_eight_h200_are_parsed_in_bytes(self) -> None:
        """Eight H200 rows become eight devices, MiB converted to bytes exactly."""
        parsed = parse_gpus(EIGHT_H200)
        assert parsed.skipped == {}
        assert len(parsed.rows) == 8
        assert parsed.rows[0] == GpuDevice(
            index=0,
            uuid=H200_UUIDS[0],
            name="NVIDIA H200",
            memory_used_bytes=97612 * 1048576,
            memory_total_bytes=143771 * 1048576,
        )
        assert [device.index for device in parsed.rows] == list(range(8))
        assert parsed.rows[7].memory_used_bytes == 97619 * MIB

    def test_eight_b200_from_bytes_output(self) -> None:
        """Transport output arrives as bytes; B200 rows parse the same way."""
        parsed = parse_gpus(EIGHT_B200.encode())
        assert [device.name for device in parsed.rows] == ["NVIDIA B200"] * 8
        assert parsed.rows[3].memory_used_bytes == 180224 * MIB
        assert parsed.rows[3].memory_total_bytes == 183359 * MIB

    def test_names_with_spaces_and_commas_are_kept_whole(self) -> None:
        """The name is everything between uuid and the two memory fields."""
        text = (
            "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3, 1, 81559\n"
            "1, GPU-aaaaaaaa-0000-0000-0000-000000000001, NVIDIA H200 NVL, 2, 143771\n"
            "2, GPU-aaaaaaaa-0000-0000-0000-000000000002, Odd, Vendor Name, 3, 4\n"
        )
        parsed = parse_gpus(text)
        assert [device.name for device in parsed.rows] == [
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H200 NVL",
            "Odd, Vendor Name",
        ]
        assert parsed.rows[2].memory_used_bytes == 3 * MIB

    def test_not_available_rows_are_skipped_and_counted(self) -> None:
        """[N/A] and [Not Supported] memory drop the row and count not_available."""
        text = (
            "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA GB10, [N/A], [N/A]\n"
            "1, GPU-aaaaaaaa-0000-0000-0000-000000000001, NVIDIA H200, [Not Supported], 143771\n"
            "2, GPU-aaaaaaaa-0000-0000-0000-000000000002, NVIDIA H200, 0, 143771\n"
        )
        parsed = parse_gpus(text)
        assert [device.index for device in parsed.rows] == [2]
        assert parsed.skipped == {"not_available": 2}
        assert parsed.skipped_total == 2

    def test_blank_lines_trailing_spaces_and_crlf_are_tolerated(self) -> None:
        """Blank lines are not rows; spaces and CR around fields are stripped."""
        text = (
            "\r\n0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA H200 , 10 , 143771   \r\n   \n"
        )
        parsed = parse_gpus(text)
        assert parsed.skipped == {}
        assert parsed.rows[0].name == "NVIDIA H200"
        assert parsed.rows[0].memory_used_bytes == 10 * MIB

    def test_garbage_is_counted_never_raised(self) -> None:
        """Header lines, short rows and bad numbers are skipped by reason."""
        text = (
            "index, uuid, name, memory.used [MiB], memory.total [MiB]\n"
            "0, GPU-aaaaaaaa-0000-0000-0000-000000000000\n"
            "x, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA H200, 1, 2\n"
            "0, , NVIDIA H200, 1, 2\n"
            "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA H200, -1, 2\n"
        )
        parsed = parse_gpus(text)
        assert parsed.rows == ()
        assert parsed.skipped == {
            "invalid_number": 3,
            "wrong_field_count": 1,
            "invalid_uuid": 1,
        }

    def test_values_with_units_are_accepted(self) -> None:
        """A 'MiB' suffix (query run without nounits) is read as MiB."""
        parsed = parse_gpus(
            "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA H200, 5 MiB, 143771 MiB\n"
        )
        assert parsed.rows[0].memory_used_bytes == 5 * MIB

    def test_empty_output_is_no_devices(self) -> None:
        """No GPUs, no rows, nothing skipped."""
        assert parse_gpus("").rows == ()
        assert parse_gpus(b"\n").skipped == {}


class TestParseComputeApps:
    def test_eight_workers_are_parsed_in_bytes(self) -> None:
        """One row per (process, GPU) becomes a GpuProcess with bytes."""
        parsed = parse_compute_apps(EIGHT_H200_APPS)
        assert parsed.skipped == {}
        assert parsed.rows[0] == GpuProcess(
            gpu_uuid=H200_UUIDS[0], pid=4121, used_memory_bytes=97102 * 1048576
        )
        assert [process.pid for process in parsed.rows] == list(range(4121, 4129))

    def test_not_available_memory_is_skipped_and_counted(self) -> None:
        """A process whose memory reads [N/A] is dropped and counted."""
        text = (
            f"{H200_UUIDS[0]}, 4121, [N/A]\n"
            f"{H200_UUIDS[1]}, 4122, [Insufficient Permissions]\n"
            f"{H200_UUIDS[2]}, 4123, 512\n"
        )
        parsed = parse_compute_apps(text)
        assert parsed.rows == (GpuProcess(H200_UUIDS[2], 4123, 512 * MIB),)
        assert parsed.skipped == {"not_available": 2}

    def test_no_processes_is_empty(self) -> None:
        """Empty output and the 'No running processes found' banner mean no rows."""
        assert parse_compute_apps(b"").rows == ()
        parsed = parse_compute_apps("No running processes found\n")
        assert parsed.rows == ()
        assert parsed.skipped == {}

    def test_bad_rows_are_counted(self) -> None:
        """Wrong field counts, non-numeric and zero PIDs are skipped by reason."""
        text = (
            f"{H200_UUIDS[0]}, 4121\n"
            f"{H200_UUIDS[0]}, 4121, python3, 10\n"
            f"{H200_UUIDS[0]}, abc, 10\n"
            f"{H200_UUIDS[0]}, 0, 10\n"
            "[N/A], 4121, 10\n"
        )
        parsed = parse_compute_apps(text)
        assert parsed.rows == ()
        assert parsed.skipped == {
            "wrong_field_count": 2,
            "invalid_number": 1,
            "invalid_pid": 1,
            "not_available": 1,
        }


class TestStreams:
    """``nvidia-smi … -lms N``: rounds of rows, read incrementally."""

    def test_stream_argv_adds_the_loop_in_milliseconds(self) -> None:
        """The interval becomes ``-lms`` in whole milliseconds, at least 1."""
        assert stream_argv(QUERY_GPUS_ARGV, 2.0) == (*QUERY_GPUS_ARGV, "-lms", "2000")
        assert stream_argv(QUERY_APPS_ARGV, 0.25) == (*QUERY_APPS_ARGV, "-lms", "250")
        assert stream_argv(QUERY_APPS_ARGV, 0.0001)[-1] == "1"

    def test_gpu_rounds_end_where_the_index_starts_again_in_any_chunking(self) -> None:
        """Three rounds of eight H200s cut at every byte give the same rounds as parse_gpus."""
        data = (EIGHT_H200 * 3).encode()
        expected = parse_gpus(EIGHT_H200).rows
        for size in (1, 7, 64, len(data)):
            decoder = SmiStreamDecoder("gpus")
            rounds = []
            for start in range(0, len(data), size):
                rounds += decoder.feed(data[start : start + size])
            assert [r.rows for r in rounds] == [expected, expected]  # the third is pending
            assert decoder.pending
            last = decoder.flush_gpus()
            assert last is not None and last.rows == expected
            assert decoder.flush_gpus() is None and not decoder.pending
            assert decoder.skipped == {}

    def test_a_malformed_line_is_counted_and_the_round_keeps_the_rest(self) -> None:
        """Bad rows are dropped by reason; the good rows of the round stay together."""
        lines = EIGHT_H200.splitlines()
        lines[3] = "3, GPU-x, NVIDIA H200, 12x, 143771"  # invalid_number
        lines.insert(5, "garbage")  # wrong_field_count
        decoder = SmiStreamDecoder("gpus")
        assert decoder.feed(("\n".join(lines) + "\n").encode()) == []
        devices = decoder.flush_gpus()
        assert devices is not None
        assert [device.index for device in devices.rows] == [0, 1, 2, 4, 5, 6, 7]
        assert decoder.skipped == {"invalid_number": 1, "wrong_field_count": 1}

    def test_an_over_long_line_is_dropped_and_counted_once(self) -> None:
        """A line over 4 KiB (no row of ours) is skipped as line_too_long, memory bounded."""
        decoder = SmiStreamDecoder("gpus")
        decoder.feed(b"0, GPU-a, X, 1, 2\n" + b"x" * 3000)
        decoder.feed(b"y" * 3000 + b"\n1, GPU-b, X, 3, 4\n")
        devices = decoder.flush_gpus()
        assert devices is not None and [d.uuid for d in devices.rows] == ["GPU-a", "GPU-b"]
        assert decoder.skipped == {"line_too_long": 1}

    def test_apps_rounds_end_only_when_flushed(self) -> None:
        """Process rows have no round mark: they wait for the quiet-stream flush."""
        decoder = SmiStreamDecoder("apps")
        assert decoder.feed(EIGHT_H200_APPS.encode()) == []
        assert decoder.feed(b"No running processes found\n" + b"GPU-a, 0, 12\n") == []
        processes = decoder.flush_apps()
        assert processes is not None
        assert processes.rows == parse_compute_apps(EIGHT_H200_APPS).rows
        assert decoder.skipped == {"invalid_pid": 1}
        assert decoder.flush_apps() is None
