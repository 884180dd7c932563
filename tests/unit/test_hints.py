"""Fix hints: every cause has one (and a runbook section), message rows take the fix from the
message, GPU context names the other processes, benign lines say why they were discounted."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from vllm_sentinel.engine.catalog.causes import (
    DEFAULT_BENIGN_PATTERNS,
    CrashCause,
    classify_exception,
)
from vllm_sentinel.engine.catalog.failure_lines import classify_failure_line
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.hints import (
    BENIGN_NOTES,
    CAUSE_HINTS,
    CONDITIONS,
    MESSAGE_HINTS,
    MODULE_PACKAGES,
    HintContext,
    MessageHint,
    explain_benign,
    hint_context,
    hint_for,
    runbook_anchor,
)
from vllm_sentinel.engine.report import render_text
from vllm_sentinel.engine.snapshot import CrashInfo, GpuProcessUsage
from vllm_sentinel.replay import replay

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "runbook.md"
LOG_101 = ROOT / "tests/golden/logs/101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log"
GIB = 1 << 30
C = CrashCause


def crash(
    cause: CrashCause, message: str, exception: str = "", phase: Phase = Phase.LOADING_WEIGHTS
) -> CrashInfo:
    return CrashInfo(cause, exception, message, phase, datetime(2026, 1, 1, tzinfo=UTC))


def runbook_sections() -> list[str]:
    return re.findall(r"^### (\S+)$", RUNBOOK.read_text(encoding="utf-8"), re.MULTILINE)


class TestEveryCause:
    @pytest.mark.parametrize("cause", list(CrashCause), ids=str)
    def test_has_a_default_hint_and_a_runbook_section(self, cause: CrashCause) -> None:
        """The bounded set is read from the enum now: a new cause needs a row and a section."""
        assert any(row.cause == cause.value and not row.phases for row in CAUSE_HINTS)
        assert cause.value in runbook_sections()
        hint = hint_for(crash(cause, ""))
        assert hint.rule == f"cause:{cause.value}"
        assert hint.runbook == f"/runbook#{cause.value}"  # the daemon's page (issue 21)
        assert 20 < len(hint.text) < 400 and "{" not in hint.text

    def test_every_row_has_its_runbook_section(self) -> None:
        """Rows prepared for causes not in the enum yet (``pending``) have their section too."""
        assert {row.cause for row in CAUSE_HINTS} <= set(runbook_sections())

    def test_cuda_oom_hint_depends_on_the_phase(self) -> None:
        """Out of memory while loading: the model does not fit; later: the memory budget."""
        loading = hint_for(crash(C.CUDA_OOM, "CUDA out of memory", phase=Phase.LOADING_WEIGHTS))
        later = hint_for(crash(C.CUDA_OOM, "CUDA out of memory", phase=Phase.PROFILING_KV_CACHE))
        assert "`--tensor-parallel-size`" in loading.text and "quantized" in loading.text
        assert "`--max-num-seqs`" in later.text and "`--enforce-eager`" in later.text


class TestMessageRows:
    @pytest.mark.parametrize("row", MESSAGE_HINTS, ids=lambda row: row.name)
    def test_each_row_is_chosen_for_its_example(self, row: MessageHint) -> None:
        """The example classifies into one of the row's causes, and that row gives the hint
        (not an earlier one), filled in: no placeholder left, values from the message."""
        cause, _ = classify_exception("", row.example)
        line = classify_failure_line(row.example)  # a shell's, systemd's, docker's line
        if cause is C.UNKNOWN and line is not None:
            cause = line.cause
        assert cause.value in row.causes, f"{row.name}: example classified as {cause}"
        hint = hint_for(crash(cause, row.example))
        assert hint.rule == row.name
        assert "{" not in hint.text and "}" not in hint.text
        assert hint.runbook == runbook_anchor(cause.value)
        assert row.source and len(hint.text) < 600

    def test_rows_only_apply_to_their_causes(self) -> None:
        """A message shape of another cause does not override the classified cause's hint."""
        message = "Free memory on device cuda:0 (1.0/80.0 GiB) on startup is less than desired GPU memory utilization (0.9, 72.0 GiB)."
        assert hint_for(crash(C.NCCL_ERROR, message)).rule == "cause:nccl_error"

    def test_flashinfer_versions_give_the_exact_pip_line(self) -> None:
        """The original incident: the add-on package is pinned to the main package's version."""
        hint = hint_for(
            crash(
                C.DEPENDENCY_MISMATCH,
                "flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4). "
                "Please install the same version of both packages.",
                "RuntimeError",
            )
        )
        assert hint.text.startswith("`pip install flashinfer-cubin==0.6.4`")
        jit = hint_for(
            crash(
                C.DEPENDENCY_MISMATCH,
                "flashinfer-jit-cache version (0.5.2) does not match flashinfer version (0.5.3)",
            )
        )
        assert "`pip install flashinfer-jit-cache==0.5.3`" in jit.text

    @pytest.mark.parametrize(
        ("module", "package"),
        [
            ("cv2", "opencv-python-headless"),
            ("PIL", "pillow"),
            ("yaml", "PyYAML"),
            ("google.protobuf", "protobuf"),
            ("flashinfer", "flashinfer-python"),
            ("flashinfer.jit", "flashinfer-python"),
            ("sentencepiece", "sentencepiece"),
            ("mistral_common.tokens", "mistral-common"),
        ],
    )
    def test_missing_module_names_the_package(self, module: str, package: str) -> None:
        """The package to install, from the module→package table where the names differ."""
        hint = hint_for(crash(C.IMPORT_ERROR, f"No module named '{module}'", "ModuleNotFoundError"))
        assert hint.text.startswith(f"`pip install {package}` ")
        assert f"module {module} is missing" in hint.text

    def test_vllm_extension_missing_is_a_build_not_a_package(self) -> None:
        """``vllm._C`` is vLLM's own compiled extension: reinstall or build, no other package."""
        hint = hint_for(crash(C.IMPORT_ERROR, "No module named 'vllm._C'", "ModuleNotFoundError"))
        assert hint.rule == "vllm_extension_missing" and "pip install -e ." in hint.text

    @pytest.mark.parametrize(
        "module",
        [
            "vllm._C",
            "vllm._moe_C",
            "vllm._rocm_C",
            "vllm.vllm_flash_attn._vllm_fa2_C",
        ],
    )
    def test_a_missing_vllm_extension_names_a_matching_build(self, module: str) -> None:
        """A compiled extension of vLLM's own (``vllm/_C``, its flash-attention build's
        ``_vllm_fa2_C``): vllm is installed, so the fix is a vllm build that matches the
        installed torch and CUDA, never ``pip install vllm``."""
        hint = hint_for(crash(C.IMPORT_ERROR, f"No module named '{module}'", "ModuleNotFoundError"))
        assert hint.rule == "vllm_extension_missing", hint
        assert hint.text.startswith(f"vLLM's compiled extension {module} is missing: ")
        assert "the vllm wheel built for the installed torch and CUDA" in hint.text
        assert "`pip install vllm`" not in hint.text

    @pytest.mark.parametrize(
        "module",
        [
            "vllm.entrypoints.openai.tool_parsers",
            "vllm.model_executor.layers.fused_moe.configs",
            "vllm._custom_ops",
        ],
    )
    def test_a_missing_vllm_submodule_is_not_a_missing_package(self, module: str) -> None:
        """``No module named 'vllm.X'``: Python imported ``vllm`` itself before failing on X, so
        vllm is installed; ``pip install vllm`` (the third-party row's fix) changes nothing. The
        hint names the module, says what the installed vLLM lacks and how to get the release
        that has it (a new user's trial was told to install vllm into a vLLM environment)."""
        hint = hint_for(crash(C.IMPORT_ERROR, f"No module named '{module}'", "ModuleNotFoundError"))
        assert hint.rule == "vllm_submodule_missing", hint
        assert hint.text == (
            f"vLLM is installed but has no module {module}: the code importing it (a plugin, "
            "a model's remote code, a script) was written for another vLLM release, or this "
            "vllm is an incomplete build; check which vllm is installed (`pip show vllm`) and "
            "install the release that code needs, the vllm wheel built for the installed torch "
            "and CUDA (`pip install --force-reinstall vllm==VERSION`); a `vllm/` source "
            "directory in the unit's working directory shadows the installed package."
        )

    def test_vllm_itself_missing_is_a_package_to_install(self) -> None:
        """``No module named 'vllm'``: vLLM is not installed in the interpreter the unit runs;
        installing it is the fix (the third-party row)."""
        hint = hint_for(crash(C.IMPORT_ERROR, "No module named 'vllm'", "ModuleNotFoundError"))
        assert hint.rule == "missing_module"
        assert hint.text.startswith("`pip install vllm` into the unit's environment")

    def test_a_shadowed_vllm_names_the_shadow(self) -> None:
        """``'vllm' is not a package``: a file named ``vllm.py`` (on the path before the installed
        package) was imported as ``vllm``; no install fixes that."""
        hint = hint_for(
            crash(
                C.IMPORT_ERROR,
                "No module named 'vllm.entrypoints'; 'vllm' is not a package",
                "ModuleNotFoundError",
            )
        )
        assert hint.rule == "vllm_shadowed", hint
        assert "vllm.py" in hint.text and "vllm.entrypoints" in hint.text
        assert "pip install" not in hint.text

    @pytest.mark.parametrize(
        "message",
        [
            "No module named 'vllm.x`; rm -rf ~; echo `'",
            "No module named 'vllm.$(reboot)'",
            "No module named 'vllm.1abc'",
        ],
    )
    def test_a_vllm_module_of_the_wrong_shape_is_never_named(self, message: str) -> None:
        """Only a dotted Python identifier is named in a hint: log text never becomes part of
        one (the cause's own hint instead)."""
        hint = hint_for(crash(C.IMPORT_ERROR, message, "ModuleNotFoundError"))
        assert hint.rule == "cause:import_error", hint
        assert "rm -rf" not in hint.text and "reboot" not in hint.text and "1abc" not in hint.text

    @pytest.mark.parametrize(
        ("path", "package"),
        [
            ("/usr/local/lib/python3.12/dist-packages/vllm/_C.abi3.so", "vllm"),
            (
                "/opt/venv/lib/python3.11/site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so",
                "flash-attn",
            ),
            ("/opt/venv/lib/python3.11/site-packages/xformers/_C.so", "xformers"),
        ],
    )
    def test_undefined_symbol_names_the_extension_to_rebuild(self, path: str, package: str) -> None:
        """The package of the extension (its directory, or the table for a top-level .so)."""
        hint = hint_for(
            crash(
                C.DEPENDENCY_MISMATCH,
                f"{path}: undefined symbol: _ZN3c104cuda9SetDeviceEi",
                "ImportError",
            )
        )
        assert hint.text.startswith(f"Reinstall or rebuild {package} against the installed torch")
        assert path.rsplit("/", 1)[1] in hint.text

    def test_gated_repository_names_the_repository(self) -> None:
        """The repository comes from the URL in the message; the token is the fix."""
        hint = hint_for(
            crash(
                C.MODEL_NOT_FOUND,
                "403 Client Error. Cannot access gated repo for url "
                "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/main/config.json.",
                "huggingface_hub.errors.GatedRepoError",
            )
        )
        assert hint.text.startswith("`meta-llama/Llama-3.1-8B-Instruct` is gated")
        assert "`HF_TOKEN`" in hint.text

    def test_driver_version_is_decoded(self) -> None:
        """CUDA encodes 11.4 as 11040: the hint says 11.4."""
        hint = hint_for(
            crash(
                C.DRIVER_ERROR,
                "The NVIDIA driver on your system is too old (found version 11040).",
                "RuntimeError",
            )
        )
        assert "CUDA 11.4" in hint.text

    def test_kv_cache_numbers_come_from_the_message(self) -> None:
        """Needed against available, and vLLM's own estimate of the length that fits."""
        memory = hint_for(
            crash(
                C.KV_CACHE_INSUFFICIENT,
                "To serve at least one request with the models's max seq len (262144), (17.00 GiB"
                " KV cache is needed, which is larger than the available KV cache memory (9.45 "
                "GiB). Based on the available memory, the estimated maximum model length is "
                "145600. Try increasing `gpu_memory_utilization`.",
                "ValueError",
            )
        )
        assert memory.text.startswith(
            "A sequence of 262144 tokens needs 17.00 GiB of KV cache, 9.45 GiB is available: "
            "lower `--max-model-len` to 145600 or less"
        )
        tokens = hint_for(
            crash(
                C.KV_CACHE_INSUFFICIENT,
                "The model's max seq len (4096) is larger than the maximum number of tokens that "
                "can be stored in KV cache (3664).",
                "ValueError",
            )
        )
        assert "lower `--max-model-len` to 3664 or less" in tokens.text

    def test_port_in_use_names_the_port(self) -> None:
        """Which port, on which address, and how to see who holds it."""
        hint = hint_for(
            crash(
                C.PORT_IN_USE,
                "[Errno 98] error while attempting to bind on address ('0.0.0.0', 8001): "
                "address already in use",
                "OSError",
            )
        )
        assert hint.text.startswith("Port 8001 on 0.0.0.0 is taken by another process")
        assert "`ss -ltnp 'sport = :8001'`" in hint.text

    def test_message_values_are_cut_short(self) -> None:
        """Log text is hostile: a value taken from it is bounded and on one line."""
        module = "m" * 5000
        hint = hint_for(crash(C.IMPORT_ERROR, f"No module named '{module}'"))
        assert len(hint.text) < 400 and "\n" not in hint.text


class TestGpuContext:
    MESSAGE = (
        "Free memory on device cuda:0 (10.52/79.19 GiB) on startup is less than desired GPU "
        "memory utilization (0.90, 71.27 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes."
    )

    def test_utilization_that_fits_is_computed(self) -> None:
        """10.52 of 79.19 GiB free: a utilization of 0.13 still fits."""
        hint = hint_for(crash(C.GPU_MEMORY_IN_USE, self.MESSAGE, "ValueError"))
        assert hint.text.startswith(
            "GPU cuda:0 had 10.52 GiB free of 79.19 GiB; `--gpu-memory-utilization 0.90` wants "
            "71.27 GiB"
        )
        assert "lower `--gpu-memory-utilization` to 0.13 or less" in hint.text
        assert "Now on this host" not in hint.text  # no GPU data: nothing made up

    def test_only_the_units_gpus_are_named_when_known(self) -> None:
        """The unit's processes are on GPU 0: a process on GPU 1 alone is not named (the
        demo's hint listed every process of an 8-GPU host for a one-GPU unit)."""
        context = HintContext(
            "vllm-a.service",
            (
                GpuProcessUsage(100, 0, 2 * GIB, "vllm-a.service"),
                GpuProcessUsage(200, 0, 30 * GIB, "jupyter.service"),
                GpuProcessUsage(200, 1, 30 * GIB, "jupyter.service"),
                GpuProcessUsage(400, 1, 1 * GIB, "vllm-b.service"),
            ),
        )
        hint = hint_for(crash(C.GPU_MEMORY_IN_USE, self.MESSAGE, "ValueError"), context)
        assert hint.text.endswith(
            " Now on its GPUs: jupyter.service (pid 200) holds 30.0 GiB on GPU 0."
        )
        assert "pid 100" not in hint.text  # its own

    def test_the_gpus_it_used_at_start_count_as_its_gpus(self) -> None:
        """No process of the unit now (it crashed): the GPUs its incarnation used at start."""
        context = HintContext(
            "vllm-a.service",
            (
                GpuProcessUsage(200, 2, 30 * GIB, "jupyter.service"),
                GpuProcessUsage(400, 1, 1 * GIB, "vllm-b.service"),
            ),
            held_by_others_at_start={"inv": {2: 30 * GIB}},
        )
        hint = hint_for(crash(C.GPU_MEMORY_IN_USE, self.MESSAGE, "ValueError"), context)
        assert "Now on its GPUs: jupyter.service (pid 200) holds 30.0 GiB on GPU 2." in hint.text
        assert "vllm-b" not in hint.text

    def test_other_processes_are_named_largest_first(self) -> None:
        """Nothing tells the unit's GPUs (no process of its own, no start reading): the GPU
        collector's processes on the whole host, summed per process."""
        context = HintContext(
            "vllm-a.service",
            (
                GpuProcessUsage(200, 0, 30 * GIB, "jupyter.service"),
                GpuProcessUsage(200, 1, 30 * GIB, "jupyter.service"),
                GpuProcessUsage(300, 0, 8 * GIB, None),
                GpuProcessUsage(400, 1, 1 * GIB, "vllm-b.service"),
                GpuProcessUsage(500, 1, GIB // 2, None),
            ),
        )
        hint = hint_for(crash(C.GPU_MEMORY_IN_USE, self.MESSAGE, "ValueError"), context)
        assert hint.text.endswith(
            " Now on this host: jupyter.service (pid 200) holds 60.0 GiB on GPUs 0, 1; "
            "pid 300 holds 8.0 GiB on GPU 0; vllm-b.service (pid 400) holds 1.0 GiB on GPU 1, "
            "and 1 more."
        )
        assert "pid 100" not in hint.text

    def test_cause_hint_without_a_known_message_names_them_too(self) -> None:
        """``gpu_memory_in_use`` from another message shape still names the other processes."""
        context = HintContext("u", (GpuProcessUsage(7, 3, 4 * GIB, "other.service"),))
        hint = hint_for(crash(C.GPU_MEMORY_IN_USE, "Error in memory profiling."), context)
        assert hint.rule == "cause:gpu_memory_in_use"
        assert hint.text.endswith("other.service (pid 7) holds 4.0 GiB on GPU 3.")

    def test_other_causes_do_not_name_processes(self) -> None:
        """Only memory causes mention GPU processes."""
        context = HintContext("u", (GpuProcessUsage(7, 3, 4 * GIB, "other.service"),))
        assert "other.service" not in hint_for(crash(C.NCCL_ERROR, "NCCL error"), context).text


class TestBenign:
    def test_every_default_pattern_has_a_note(self) -> None:
        """The notes follow ``DEFAULT_BENIGN_PATTERNS`` one for one, each with its example."""
        assert tuple(note.pattern for note in BENIGN_NOTES) == DEFAULT_BENIGN_PATTERNS
        for note in BENIGN_NOTES:
            assert re.search(note.pattern, note.example), note.pattern
            assert explain_benign(note.example) == note.why
            assert note.source

    def test_sparse_matrix_error_is_explained(self) -> None:
        """The original incident's ERROR line: harmless, and why."""
        why = explain_benign(
            "Failed to import Triton kernels. Please make sure your triton version is "
            "compatible. Error: cannot import name 'SparseMatrix' from 'triton_kernels.tensor'"
        )
        assert why.startswith("harmless: only gpt-oss with the Triton MoE kernels needs them")

    def test_a_configured_pattern_is_named_as_such(self) -> None:
        """A line matched by a pattern of the config (no note) says so."""
        assert "benign_patterns" in explain_benign("ERROR something site-specific")


def test_module_table_maps_import_names_to_other_package_names() -> None:
    """Only names that differ are listed: the fallback already installs a same-name package."""
    assert [module for module, package in MODULE_PACKAGES.items() if module == package] == []


class TestMemoryHeldByOthers:
    """A ``cuda_oom`` where another process held the GPU's memory: stop it, not a smaller
    budget (PyTorch's report names the other processes: c10 CUDACachingAllocator)."""

    # corpus 007: another process (3888866) held 71 of GPU 2's 79 GiB when the worker loaded
    HELD = (
        "CUDA out of memory. Tried to allocate 60.00 MiB. GPU 2 has a total capacity of 79.22 "
        "GiB of which 2.06 MiB is free. Process 3888866 has 71.11 GiB memory in use. Including "
        "non-PyTorch memory, this process has 8.08 GiB memory in use. Of the allocated memory "
        "4.90 GiB is allocated by PyTorch, and 66.39 MiB is reserved by PyTorch but unallocated."
    )
    # the process itself held nearly all of it; another one (a display server) a little
    OWN = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.22 GiB "
        "of which 1.06 GiB is free. Process 1234 has 312.00 MiB memory in use. Including "
        "non-PyTorch memory, this process has 77.80 GiB memory in use."
    )
    COMMAND = "`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv`"

    @pytest.mark.parametrize("phase", [Phase.LOADING_WEIGHTS, Phase.PROFILING_KV_CACHE])
    def test_another_process_holding_the_gpu_is_named_as_the_cause(self, phase: Phase) -> None:
        """The hint says another process held the memory and how to find it; it does not tell
        to shrink the model's budget or split the model."""
        hint = hint_for(crash(C.CUDA_OOM, self.HELD, "torch.OutOfMemoryError", phase))
        assert hint.rule == "oom_allocation"
        assert "process 3888866 held 71.11 GiB there" in hint.text
        assert self.COMMAND in hint.text
        assert "already in use" in hint.text
        for advice in ("--gpu-memory-utilization", "--max-model-len", "--tensor-parallel-size"):
            assert f"lower `{advice}`" not in hint.text and f"raise `{advice}`" not in hint.text

    def test_each_condition_holds_for_its_example(self) -> None:
        """Every condition a row may name is in the table and holds for its example."""
        named = {row.when for row in CAUSE_HINTS if row.when}
        assert named <= set(CONDITIONS)
        for name, condition in CONDITIONS.items():
            assert condition.name == name and condition.source
            example = crash(C.CUDA_OOM, condition.example)
            context = condition.example_context(example) if condition.example_context else None
            assert condition.holds(example, context), name
            assert condition.example_context is None or not condition.holds(example, None), name

    def test_own_pid_unknown_in_a_container_is_not_counted(self) -> None:
        """Without ``this process`` (a PID namespace), the largest process is taken as itself."""
        message = self.OWN.replace("Including non-PyTorch memory, this process", "Process 77")
        hint = hint_for(crash(C.CUDA_OOM, message, phase=Phase.PROFILING_KV_CACHE))
        assert self.COMMAND not in hint.text

    def test_the_gpu_collectors_reading_at_start_is_evidence_too(self) -> None:
        """No process list in the message, but the GPU collector saw other processes hold 30 of
        GPU 0's 80 GiB when the crashed incarnation started, on a GPU it then used."""
        oom = CrashInfo(
            C.CUDA_OOM, "torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB.",
            Phase.PROFILING_KV_CACHE, datetime(2026, 1, 1, tzinfo=UTC), "inv-1",
        )  # fmt: skip
        totals = {0: 80 * GIB, 1: 80 * GIB}
        held = HintContext("u", held_by_others_at_start={"inv-1": {0: 30 * GIB}},
                           gpu_total_bytes=totals)  # fmt: skip
        assert self.COMMAND in hint_for(oom, held).text
        for context in (
            HintContext("u", held_by_others_at_start={"inv-1": {0: GIB // 2}},
                        gpu_total_bytes=totals),  # a little: the budget
            HintContext("u", held_by_others_at_start={"inv-0": {0: 30 * GIB}},
                        gpu_total_bytes=totals),  # another incarnation's start
            HintContext("u", held_by_others_at_start={"inv-1": {0: 30 * GIB}}),  # size unknown
        ):  # fmt: skip
            assert self.COMMAND not in hint_for(oom, context).text, context

    def test_own_memory_keeps_the_budget_hint(self) -> None:
        """312 MiB of another process on an 79 GiB GPU is not the cause: the budget is."""
        hint = hint_for(
            crash(C.CUDA_OOM, self.OWN, "torch.OutOfMemoryError", Phase.PROFILING_KV_CACHE)
        )
        assert self.COMMAND not in hint.text
        assert "`--max-num-seqs`" in hint.text


class TestKvCacheNotTheArguments:
    """A KV cache too small because the GPU was not the unit's own: no smaller context."""

    MESSAGE = (
        "To serve at least one request with the models's max seq len (16384), (3.0 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (1.87 GiB). Based on the "
        "available memory, the estimated maximum model length is 10224."
    )

    def _crash(self) -> CrashInfo:
        return CrashInfo(
            C.KV_CACHE_INSUFFICIENT, "ValueError", self.MESSAGE, Phase.PROFILING_KV_CACHE,
            datetime(2026, 2, 22, tzinfo=UTC), "inv-1",
        )  # fmt: skip

    def test_alone_the_message_fixes_the_arguments(self) -> None:
        """No evidence of other processes: vLLM's own estimate of what fits."""
        hint = hint_for(self._crash(), HintContext("u"))
        assert hint.rule == "kv_cache_memory"
        assert "lower `--max-model-len` to 10224" in hint.text

    def test_memory_held_by_others_at_start_says_stop_them(self) -> None:
        """The GPU collector saw 30 of 80 GiB held by others when it started: find and stop
        them, never shrink the context; the processes on the GPU now are named."""
        context = HintContext(
            "u",
            (GpuProcessUsage(777, 0, 30 * GIB, "vllm-b.service"),),
            held_by_others_at_start={"inv-1": {0: 30 * GIB}},
            gpu_total_bytes={0: 80 * GIB},
        )
        hint = hint_for(self._crash(), context)
        assert hint.rule == "cause:kv_cache_insufficient"
        assert "do not shrink `--max-model-len`" in hint.text
        assert "`nvidia-smi --query-compute-apps=" in hint.text
        assert "vllm-b.service (pid 777) holds 30.0 GiB on GPU 0" in hint.text
        assert "lower `--max-model-len`" not in hint.text

    def test_a_later_ready_start_of_the_same_model_says_transient(self) -> None:
        """Corpus 101: the first start after boot got 1.87 GiB of KV cache, the restart with the
        same model 11.33 GiB and became ready: the shortage was transient."""
        result = replay([[LOG_101.read_bytes()]])
        (unit,) = result.units
        crashed = unit.incarnations[1].crash
        assert crashed is not None and crashed.cause is C.KV_CACHE_INSUFFICIENT
        hint = hint_for(crashed, hint_context(unit))
        assert hint.text.startswith(
            "A later start with the same model became ready: the shortage was transient (memory "
            "held by another process?)"
        )
        assert "lower `--max-model-len`" not in hint.text
        text = render_text([unit])
        assert "hint: A later start with the same model became ready" in text

    def test_a_later_ready_start_of_another_model_is_no_evidence(self) -> None:
        """Another model fitting says nothing about this one's arguments."""
        first, restart = LOG_101.read_bytes().split(b"Scheduled restart job", 1)
        first = first.replace(b"qwen2_5_14b_instruct_awq", b"another_model")
        result = replay([[first + b"Scheduled restart job" + restart]])
        (unit,) = result.units
        crashed = unit.incarnations[1].crash
        assert crashed is not None
        assert hint_for(crashed, hint_context(unit)).rule == "kv_cache_memory"

    def test_runbook_has_the_branch(self) -> None:
        text = RUNBOOK.read_text(encoding="utf-8")
        section = text.split("\n### kv_cache_insufficient\n", 1)[1].split("\n### ", 1)[0]
        assert "later start with the same model" in section
        assert "held by other processes" in section


class TestKilled:
    """A SIGKILL nobody sent on purpose is most often the kernel's OOM killer."""

    @pytest.mark.parametrize(
        "message",
        [
            "Killed",  # bash's job report (corpus 312)
            "./serve.sh: line 12:  4242 Killed                  python -m vllm.entrypoints",
            "main process killed, signal KILL",  # systemd: code=killed, status=9/KILL
            "vllm-1 exited with code 137",  # docker compose: 128 + 9
        ],
    )
    def test_sigkill_names_the_oom_killer_and_how_to_confirm(self, message: str) -> None:
        """The OOM killer as the likely cause, the commands that confirm it, and the fixes."""
        hint = hint_for(crash(C.KILLED, message, phase=Phase.PROFILING_KV_CACHE))
        assert "OOM killer" in hint.text
        assert "`journalctl -k --grep 'Out of memory|oom-kill'`" in hint.text
        assert "`systemctl show -p MemoryMax,MemoryPeak " in hint.text
        for fix in ("`MemoryMax`", "`--swap-space`", "`--cpu-offload-gb`"):
            assert fix in hint.text
        assert hint.runbook == "/runbook#killed"

    def test_other_signals_keep_the_generic_hint(self) -> None:
        """A segfault is not the OOM killer."""
        hint = hint_for(crash(C.KILLED, "Segmentation fault (core dumped)"))
        assert "OOM killer" not in hint.text

    def test_systemd_oom_kill_hint_says_how_to_confirm(self) -> None:
        """systemd's own word (``host_oom``): confirm in the kernel log and the unit's limit."""
        hint = hint_for(
            crash(
                C.HOST_OOM,
                "vllm.service: A process of this unit has been killed by the OOM killer.",
            ),
            HintContext("vllm.service"),
        )
        assert "`journalctl -k --grep 'Out of memory|oom-kill'`" in hint.text
        assert "`systemctl show -p MemoryMax,MemoryPeak vllm.service`" in hint.text
        assert "`--cpu-offload-gb`" in hint.text

    def test_runbook_section_says_how_to_confirm(self) -> None:
        """docs/runbook.md#killed: the OOM killer, the commands, the fixes."""
        text = RUNBOOK.read_text(encoding="utf-8")
        section = text.split("\n### killed\n", 1)[1].split("\n### ", 1)[0]
        for needle in (
            "OOM killer",
            "journalctl -k --grep 'Out of memory|oom-kill'",
            "systemctl show -p MemoryMax,MemoryPeak",
            "MemoryMax",
            "--swap-space",
            "--cpu-offload-gb",
        ):
            assert needle in section, needle


def test_unknown_hint_at_the_end_of_the_calendar_has_no_window() -> None:
    """A crash logged at year 9999 (a hostile log) gives the unit's command, no window."""
    late = CrashInfo(C.UNKNOWN, "", "", Phase.STARTING, datetime.max.replace(tzinfo=UTC))
    hint = hint_for(late, HintContext("vllm.service"))
    assert "`journalctl --unit vllm.service -o cat`" in hint.text


class TestWhatTheInputTold:
    """A hint's command says only what the input told: the unit's name when systemd's lines or
    the journal gave it (else a placeholder to fill), UTC only for the journal's real times."""

    UNKNOWN_CRASH = (
        "Jan 28 10:30:07 host1 vllm[4242]: INFO 01-28 10:30:07 [api_server.py:1043] vLLM API "
        "server version 0.17.0",
        "Jan 28 10:30:09 host1 vllm[4242]: ERROR 01-28 10:30:09 [core.py:1] EngineCore failed to "
        "start.",
        "Jan 28 10:30:09 host1 vllm[4242]: Traceback (most recent call last):",
        'Jan 28 10:30:09 host1 vllm[4242]:   File "x.py", line 1, in f',
        "Jan 28 10:30:09 host1 vllm[4242]: SomethingNew: nobody has seen this",
    )
    KILLED = (
        "Jan 28 10:30:07 host1 vllm[4242]: INFO 01-28 10:30:07 [api_server.py:1043] vLLM API "
        "server version 0.17.0",
        "Jan 28 10:30:09 host1 bash[4200]: ./serve.sh: line 12:  4242 Killed"
        "                  python -m vllm.entrypoints.openai.api_server",
    )
    STARTED = "Jan 28 10:30:06 host1 systemd[1]: Started vllm-a.service - vLLM A."

    def _hint(self, lines: Sequence[str], **options: Any) -> str:
        result = replay([["\n".join(lines).encode() + b"\n"]], reference_year=2026, **options)
        (unit,) = result.units
        crashed = [item.crash for item in unit.incarnations if item.crash is not None]
        assert crashed, render_text([unit])
        return hint_for(crashed[-1], hint_context(unit)).text

    def test_plain_text_times_are_the_hosts_local_time(self) -> None:
        """journalctl's short output printed local time: the window is given without UTC
        (journalctl reads it as local time, as the log was) and the year is said assumed."""
        text = self._hint(self.UNKNOWN_CRASH)
        assert "--since '2026-01-28 10:20:09' --until '2026-01-28 10:31:09'" in text
        assert "UTC" not in text
        assert "the year 2026 is assumed" in text

    def test_text_with_zoned_stamps_keeps_utc(self) -> None:
        """``docker logs -t`` or Kubernetes: RFC 3339 stamps with their zone are real times."""
        lines = [
            f"2026-01-28T10:30:0{7 if index == 0 else 9}.123456789Z " + line.split(": ", 1)[1]
            for index, line in enumerate(self.UNKNOWN_CRASH)
        ]
        text = self._hint(lines)
        assert "--since '2026-01-28 10:20:09 UTC' --until '2026-01-28 10:31:09 UTC'" in text
        assert "assumed" not in text

    def test_the_journals_times_stay_utc(self) -> None:
        """A crash of a journal input (real timestamps): the window in UTC, no year caveat."""
        crash = CrashInfo(C.UNKNOWN, "", "", Phase.STARTING, datetime(2026, 1, 28, 10, 30, 9,
                                                                      tzinfo=UTC))  # fmt: skip
        text = hint_for(crash, HintContext("vllm.service")).text
        assert "--since '2026-01-28 10:20:09 UTC' --until '2026-01-28 10:31:09 UTC'" in text
        assert "assumed" not in text

    def test_a_unit_name_nobody_gave_is_a_placeholder(self) -> None:
        """Plain text that names no systemd unit: ``<unit>``, never replay's ``vllm``."""
        text = self._hint(self.KILLED)
        assert "`systemctl show -p MemoryMax,MemoryPeak <unit>`" in text
        assert "--unit vllm " not in text

    def test_a_unit_name_from_systemd_or_the_user_is_used(self) -> None:
        """systemd's own line names the unit; ``--unit`` is the user's word for it."""
        assert "MemoryMax,MemoryPeak vllm-a.service`" in self._hint((self.STARTED, *self.KILLED))
        assert "MemoryMax,MemoryPeak vllm-b.service`" in self._hint(
            self.KILLED, unit="vllm-b.service"
        )
