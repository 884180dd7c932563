"""The failure catalog (``engine/catalog/failures.tsv``), its matcher, and the causes it gives.

The lines below are real: each cites the public report it comes from (issue 19's examples are
from labelled logs of the project's fresh sets; the others from vllm-project/vllm bug reports).
"""

from __future__ import annotations

from collections import Counter
from importlib import resources

import pytest

from vllm_sentinel.engine.catalog.causes import (
    CrashCause,
    bare_raise_cause,
    catalog_cause,
    classify_exception,
)
from vllm_sentinel.engine.catalog.failures import (
    FailureCatalog,
    load_rows,
    packaged_catalog,
    site_of,
)
from vllm_sentinel.engine.catalog.phases import Outcome
from vllm_sentinel.replay import replay

_HEADER = (
    "cause\tkind\texception\tlibrary\traised_in\treleases\tsite_sole\traise_only\ttemplate\twhy\n"
)
_CAUSES = {cause.value for cause in CrashCause} - {"pending"}
_TEXT = resources.files("vllm_sentinel.engine.catalog").joinpath("failures.tsv").read_text()


class TestCatalogData:
    def test_every_line_is_a_row_with_a_bounded_cause(self) -> None:
        """Each line parses; its cause is one of the bounded set (``pending`` never is)."""
        rows = load_rows(_TEXT, everything=True)
        assert len(rows) == _TEXT.count("\n") - 1 > 10_000
        assert {row.cause for row in rows} <= _CAUSES

    def test_every_row_names_its_source_file_and_releases(self) -> None:
        """A row says where it is raised (a file of its library) and in which releases."""
        for row in load_rows(_TEXT, everything=True):
            assert row.raised_in, row
            assert row.releases and all(row.releases), row
            if row.library == "vllm":
                assert row.raised_in.startswith("vllm/") and ".py:" in row.raised_in, row
            else:
                assert row.raised_in.startswith(f"{row.library}:"), row
            assert row.kind in {"raise", "log", "message", "class"}, row
            if row.cause != "unknown":
                assert row.why, row  # reviewed, vocabulary or location

    def test_the_catalog_covers_vllm_and_its_libraries(self) -> None:
        """vLLM 0.6 → 0.33 and the libraries whose messages surface in its logs are all read."""
        rows = load_rows(_TEXT, everything=True)
        libraries = Counter(row.library for row in rows)
        assert {
            "vllm",
            "torch",
            "cuda_runtime",
            "nccl",
            "hip",
            "huggingface_hub",
            "ray",
            "triton",
            "flashinfer",
        } <= set(libraries)
        releases = {release for row in rows if row.library == "vllm" for release in row.releases}
        assert {"0.6.6", "0.33.0"} <= releases

    def test_the_default_load_keeps_only_what_matching_reads(self) -> None:
        """Rows of unknown cause are data for the docs; the matcher reads the known ones."""
        packaged = load_rows()
        everything = load_rows(_TEXT, everything=True)
        assert packaged == load_rows(_TEXT)
        assert all(row.cause != "unknown" for row in packaged)
        assert len(packaged) == sum(row.cause != "unknown" for row in everything)

    def test_raise_only_means_raised_in_vllm_and_logged_nowhere(self) -> None:
        """The script's ``raise_only`` column agrees with the rows themselves."""
        rows = load_rows(_TEXT, everything=True)
        logged = {row.template for row in rows if row.kind == "log"}
        raised = {row.template for row in rows if row.kind == "raise" and row.library == "vllm"}
        for row in rows:
            assert row.raise_only == (row.template in raised and row.template not in logged), row


class TestMatching:
    def test_a_value_of_any_content_matches(self) -> None:
        """Formatted values are free: numbers, names, lists."""
        found = packaged_catalog().match(
            "The model's max seq len (29000) is larger than the maximum number of tokens that "
            "can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or "
            "decreasing `max_model_len` when initializing the engine.",
            "ValueError",
        )
        assert found is not None and found.row.cause == "kv_cache_insufficient"

    def test_a_message_cut_after_its_head_matches(self) -> None:
        """A paste cut mid-word after the head still names its template (issue 19, example)."""
        found = packaged_catalog().match(
            "To serve at least one request with the model's max seq len (…), (4.26 GiB KV cach"
        )
        assert found is not None and found.row.cause == "kv_cache_insufficient"

    def test_a_cut_before_the_head_is_complete_does_not_match(self) -> None:
        """Too little of a template is no evidence."""
        assert packaged_catalog().match("To serve at least") is None

    def test_a_template_beginning_with_a_value_needs_every_part(self) -> None:
        """Without a fixed head, a message must carry all fixed parts (no cut tolerance)."""
        rows = load_rows(
            _HEADER + "config_error\traise\tValueError\tvllm\tvllm/x.py:f\t0.33.0\t0\t1\t"
            "{} is not divisible by TP {}\ttest\n"
        )
        catalog = FailureCatalog(rows)
        assert catalog.match("hidden 4096 is not divisible by TP 3") is not None
        assert catalog.match("CUDA driver error: out of memory") is None

    def test_the_raising_frame_picks_the_row(self) -> None:
        """Where one text is raised in several files, the frame's file and function decide."""
        text = (
            "%s\traise\tRuntimeError\tvllm\t%s\t0.33.0\t0\t1\t"
            "Something went wrong with the thing {}\ttest"
        )
        rows = load_rows(
            _HEADER
            + "\n".join(
                [text % ("cuda_error", "vllm/a.py:f"), text % ("config_error", "vllm/b.py:g")]
            )
        )
        catalog = FailureCatalog(rows)
        found = catalog.match(
            "Something went wrong with the thing 3", "RuntimeError", "vllm/b.py:g"
        )
        assert found is not None and found.row.cause == "config_error"

    def test_site_of_reads_frames_of_vllm_and_of_libraries(self) -> None:
        """A frame line becomes the catalog's ``raised_in`` form."""
        assert (
            site_of(
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/model_loader/'
                'weight_utils.py", line 192, in get_quant_config'
            )
            == "vllm/model_executor/model_loader/weight_utils.py:get_quant_config"
        )
        assert (
            site_of(
                '  File "/opt/venv/lib/python3.12/site-packages/torch/cuda/__init__.py", '
                "line 372, in _lazy_init"
            )
            == "torch:torch/cuda/__init__.py:_lazy_init"
        )
        assert site_of('  File "/home/me/serve.py", line 3, in main') is None


class TestCausesFromTheCatalog:
    """Issue 19, mechanism 1: the vocabulary is what the software can say."""

    @pytest.mark.parametrize(
        ("exception", "message", "cause"),
        [
            # issue 19's examples (labelled logs of the fresh sets); the driver's OOM text is
            # also reported in deepmodeling/deepmd-kit#3857 (torch's c10 driver API check)
            ("RuntimeError", "CUDA driver error: out of memory", CrashCause.CUDA_OOM),
            (
                "ValueError",
                "To serve at least one request with the model's max seq len (…), (4.26 GiB KV cach",
                CrashCause.KV_CACHE_INSUFFICIENT,
            ),
            (  # issue 19; the allocator's ROCm text as in gpustack/gpustack#4963 (vLLM 0.17.1)
                "torch._inductor.exc.InductorError",
                "OutOfMemoryError: HIP out of memory. Tried to allocate 192.00 GiB. GPU 0 has a "
                "total capacity of 31.98 GiB of which 31.79 GiB is free.",
                CrashCause.CUDA_OOM,
            ),
            # vllm-project/vllm#1419, #13612: get_quant_config without the method's config
            ("ValueError", "Cannot find the config file for awq", CrashCause.CONFIG_ERROR),
            ("ValueError", "Cannot find the config file for gptq", CrashCause.CONFIG_ERROR),
        ],
    )
    def test_real_lines(self, exception: str, message: str, cause: CrashCause) -> None:
        """Real lines that the words alone left ``unknown`` get the cause of their template."""
        assert classify_exception(exception, message)[0] is cause

    def test_a_cuda_runtime_string_behind_a_wrapper_names_the_cause(self) -> None:
        """``CUDA driver error: {}`` takes the cause of the driver's own reason."""
        message = "CUDA driver error: an illegal memory access was encountered"
        assert catalog_cause("RuntimeError", message) == (
            CrashCause.CUDA_ILLEGAL_MEMORY_ACCESS,
            False,
        )

    def test_a_location_default_yields_to_the_words(self) -> None:
        """A row whose cause is only where it is raised gives way to a cause its words name."""
        rows = load_rows(
            _HEADER + "config_error\traise\tValueError\tvllm\tvllm/config/x.py:f\t0.33.0\t0\t1\t"
            "Failed to set up the thing: {}\tlocation: test\n"
        )
        catalog = FailureCatalog(rows)
        assert catalog_cause("ValueError", "Failed to set up the thing: 3", None, catalog) == (
            CrashCause.CONFIG_ERROR,
            True,
        )

    def test_an_unknown_message_stays_unknown(self) -> None:
        """A message no template and no rule knows is ``unknown`` (shown with its line)."""
        assert classify_exception("RuntimeError", "the flux capacitor overheated")[0] is (
            CrashCause.UNKNOWN
        )


class TestBareRaise:
    """Issue 19, mechanism 3: a fatal message without its exception class."""

    def test_a_raise_only_message_names_its_cause(self) -> None:
        """The KV-cache message of vllm/worker/worker.py (0.6–0.8), bare (issue 19's example)."""
        assert (
            bare_raise_cause(
                "The model's max seq len (29000) is larger than the maximum number of tokens "
                "that can be stored in KV cache (23648). Try increasing …"
            )
            is CrashCause.KV_CACHE_INSUFFICIENT
        )

    def test_a_logged_text_or_a_short_head_is_not_read_bare(self) -> None:
        """Only a template no logger prints, with a long head, is evidence by its text."""
        assert bare_raise_cause("out of memory") is None  # a library's string: any program's
        assert bare_raise_cause("Loading safetensors checkpoint shards: 100% 4/4") is None


# vllm-project/vllm#10517 (kaspersiminski, 2024-12-02): a paste of vLLM 0.6's lines without their
# headers, ending on the KV-cache message without ``ValueError:`` and without the traceback.
_BARE_PASTE = """\
Loading model weights took 14.9888 GB
Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.98GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90
# GPU blocks: 1478, # CPU blocks: 2048
Maximum concurrency for 29000 tokens per request: 0.82x
The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""


class TestBareRaiseInReplay:
    def test_a_paste_ending_on_a_raise_message_is_a_crash_with_its_cause(self) -> None:
        """The bare message ends the start: crashed, kv_cache_insufficient (not "no crash")."""
        result = replay([[_BARE_PASTE.encode()]])
        (unit,) = result.units
        last = unit.incarnations[-1]
        assert last.outcome is Outcome.CRASHED
        assert last.crash is not None
        assert last.crash.cause is CrashCause.KV_CACHE_INSUFFICIENT
        assert last.crash.message.startswith("The model's max seq len (29000)")

    def test_the_same_lines_without_the_message_are_no_crash(self) -> None:
        """The lines before it say nothing failed."""
        head = "\n".join(_BARE_PASTE.splitlines()[:4]) + "\n"
        (unit,) = replay([[head.encode()]]).units
        assert unit.incarnations[-1].outcome is not Outcome.CRASHED
