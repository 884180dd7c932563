"""Tests for ``vllm_sentinel.init_config``: targets, the banner pattern, NVML, the TOML written.

The journal, systemd and SSH parts run against the real tools in
``tests/integration/test_init_config.py``; NVML has no GPU here, so ``probe_nvml`` is tested
with ``FakeNvml`` and with the real pynvml failing to load.
"""

from __future__ import annotations

import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.fake_nvml import GIB, FakeGpu, FakeNvml, nvml_error
from vllm_sentinel.config import parse_config
from vllm_sentinel.init_config import (
    FoundUnit,
    GpuFindings,
    InitConfigError,
    LocalFindings,
    SshTarget,
    banner_regex,
    parse_ssh_target,
    probe_nvml,
    render_config,
)

EXAMPLES = Path(__file__).with_name("marker_examples.tsv")
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _examples(*events: str) -> list[str]:
    lines = EXAMPLES.read_text(encoding="utf-8").splitlines()[1:]
    rows = [line.split("\t") for line in lines if line.strip()]
    return [row[2] for row in rows if row[0] in events]


class TestSshTarget:
    @pytest.mark.parametrize(
        ("text", "target"),
        [
            ("gpu-7", SshTarget("gpu-7", "gpu-7")),
            (
                "sentinel@gpu-7.example.com",
                SshTarget("gpu-7.example.com", "gpu-7.example.com", 22, "sentinel"),
            ),
            ("10.0.0.5:2222", SshTarget("10.0.0.5", "10.0.0.5", 2222)),
            ("ops@[fd00::7]:2200", SshTarget("fd00::7", "fd00::7", 2200, "ops")),
        ],
    )
    def test_parses(self, text: str, target: SshTarget) -> None:
        """[USER@]HOST[:PORT], IPv6 in brackets; the host as written is the name."""
        assert parse_ssh_target(text) == target

    @pytest.mark.parametrize(
        ("text", "reason"),
        [
            ("gpu-7:0", "port 0 is not in 1-65535"),
            ("gpu-7:70000", "port 70000 is not in 1-65535"),
            ("gpu 7", "expected [USER@]HOST[:PORT]"),
            ("gpu-7;rm -rf /", "expected [USER@]HOST[:PORT]"),
            ("-oProxyCommand=x", "expected [USER@]HOST[:PORT]"),
            ("[1:2:3:4:5:6:7:8:9]", "is not an IPv6 address"),
            ("a" * 70, "longer than 64 characters"),
        ],
    )
    def test_refuses(self, text: str, reason: str) -> None:
        """Anything else is one error naming the value; nothing reaches a shell or ssh."""
        with pytest.raises(InitConfigError, match=re.escape(reason)):
            parse_ssh_target(text)


class TestBannerRegex:
    def test_matches_every_banner_example_and_no_other_marker(self) -> None:
        """The pattern finds each version and engine banner of the marker examples, only those."""
        pattern = re.compile(banner_regex())
        banners = _examples("process_started", "engine_init")
        logo = [line for line in banners if "█" in line]
        assert [line for line in banners if line not in logo and not pattern.search(line)] == []
        others = _examples("weights_loaded", "api_ready", "kv_cache_sized", "graph_capture_done")
        assert others and [line for line in others if pattern.search(line)] == []

    def test_has_no_named_groups(self) -> None:
        """PCRE2 (journalctl --grep) refuses a group name used twice: no names at all."""
        assert "(?P<" not in banner_regex()


class TestProbeNvml:
    def test_names_the_gpus(self) -> None:
        """NVML that loads: the product names, in index order; NVML is shut down again."""
        gpus = (
            FakeGpu("GPU-a", "NVIDIA H200", 141 * GIB, GIB),
            FakeGpu("GPU-b", b"NVIDIA H200", 141 * GIB, GIB),
        )
        nvml = FakeNvml([gpus])
        assert probe_nvml(nvml) == GpuFindings(names=("NVIDIA H200", "NVIDIA H200"))
        assert nvml.calls[-1] == "nvmlShutdown"

    def test_says_why_not(self) -> None:
        """No driver, a failing count, or no GPU: a reason, never an exception."""
        assert probe_nvml(FakeNvml.no_library()).problem.startswith("NVML did not load (")
        failing = probe_nvml(FakeNvml([nvml_error("NVMLError_DriverNotLoaded")]))
        assert failing.problem.startswith("NVML loaded but could not list the GPUs (")
        assert probe_nvml(FakeNvml([()])) == GpuFindings(problem="NVML loaded but sees no GPU")

    def test_the_real_library_without_a_gpu(self) -> None:
        """This machine's pynvml without a driver: the library's own reason."""
        findings = probe_nvml()
        if findings.names:
            pytest.skip("this machine has an NVIDIA GPU")
        assert findings.problem == "NVML did not load (NVML Shared Library Not Found)"


class TestRender:
    def test_a_gpu_host_with_units_found(self) -> None:
        """Units the glob misses are added by name; NVML GPUs make gpu = "nvml"; it parses."""
        local = LocalFindings(
            units=(
                FoundUnit("serve-llama.service", ("vLLM banner",)),
                FoundUnit("vllm-qwen.service", ("journal", "systemd")),
            ),
            notes=("systemd: systemctl failed (System has not been booted with systemd)",),
            gpus=GpuFindings(names=("NVIDIA H200",) * 8),
        )
        text = render_config(local=local, now=NOW, host_name="gpu-1")
        config = parse_config(text)
        (host,) = config.hosts
        assert (host.name, host.local, host.gpu.value) == ("gpu-1", True, "nvml")
        assert host.units == ("vllm*.service", "serve-llama.service")
        assert "#   vllm-qwen.service (journal, systemd)\n" in text
        assert "# NVML sees 8 GPUs: NVIDIA H200.\n" in text
        assert "# Not checked: systemd: systemctl failed (System has not been booted" in text
        assert all(len(line) <= 100 for line in text.splitlines())

    def test_a_central_instance_with_ssh_hosts(self) -> None:
        """--no-local with --ssh: remote hosts only, known_hosts and keys as given, a shard."""
        text = render_config(
            local=None,
            ssh_targets=[
                SshTarget("gpu-7", "gpu-7", 2222, "sentinel"),
                SshTarget("10.0.0.8", "10.0.0.8"),
            ],
            known_hosts="/etc/vllm-sentinel/known_hosts",
            client_keys=["/etc/vllm-sentinel/id_ed25519"],
            listen=":9842",
            shard="2/3",
            now=NOW,
        )
        config = parse_config(text)
        assert config.shard == "2/3" and config.exporter.listen == ":9842"
        assert [(h.name, h.address, h.port, h.user, h.gpu.value) for h in config.hosts] == [
            ("gpu-7", "gpu-7", 2222, "sentinel", "nvidia-smi"),
            ("10.0.0.8", "10.0.0.8", 22, None, "nvidia-smi"),
        ]
        assert {h.known_hosts for h in config.hosts} == {"/etc/vllm-sentinel/known_hosts"}
        assert {h.client_keys for h in config.hosts} == {("/etc/vllm-sentinel/id_ed25519",)}
        assert tomllib.loads(text)["hosts"][1]["units"] == ["vllm*.service"]

    def test_nothing_found_still_gives_a_working_config(self) -> None:
        """No unit, no GPU: the glob, gpu = "none", each reason as a comment."""
        local = LocalFindings(gpus=GpuFindings(problem="NVML did not load (no driver)"))
        text = render_config(local=local, now=NOW, host_name="box")
        (host,) = parse_config(text).hosts
        assert host.units == ("vllm*.service",) and host.gpu.value == "none"
        assert "# No vLLM service found in the journal or in systemd yet.\n" in text
        assert "# NVML did not load (no driver): no GPU memory readings." in text

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"listen": "9842"}, "expected host:port"),
            ({"shard": "4/3"}, "the shard must be 1-3"),
            ({"journalctl_args": ["--since=today"]}, "is not an allowed journalctl option"),
            (
                {"ssh_targets": [SshTarget("box", "box")]},
                "host name 'box' is used by an earlier host",
            ),
        ],
    )
    def test_a_config_that_would_not_load_is_refused(
        self, options: dict[str, object], message: str
    ) -> None:
        """What check-config would refuse is an InitConfigError with its message, not a file."""
        local = LocalFindings(gpus=GpuFindings(problem="none"))
        with pytest.raises(InitConfigError, match=re.escape(message)):
            render_config(local=local, now=NOW, host_name="box", **options)  # type: ignore[arg-type]
