"""Tests for ``vllm_sentinel.config``: TOML → validated ``Config``, errors named by path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from vllm_sentinel.config import (
    JOURNALCTL_OPTIONS,
    Config,
    DefaultsConfig,
    ExporterConfig,
    GpuBackend,
    HealthProbeConfig,
    HealthProbeUnitConfig,
    HostConfig,
    StallThresholds,
    check_config,
    default_config,
    load_config,
    parse_config,
    parse_listen_address,
    parse_shard,
    shard_of,
)
from vllm_sentinel.engine.catalog.causes import DEFAULT_BENIGN_PATTERNS
from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES, Phase
from vllm_sentinel.engine.health import ProbeSettings
from vllm_sentinel.errors import ConfigError
from vllm_sentinel.sources.transport import SshSettings

EXAMPLE = Path(__file__).resolve().parents[2] / "config.example.toml"
SECRET = "correct-horse-battery-staple"

LOCAL = '[[hosts]]\nname = "a"\nlocal = true\n'
REMOTE = '[[hosts]]\nname = "r"\naddress = "10.0.0.5"\n'


def config_error(text: str) -> str:
    """Parse ``text``, expecting a ConfigError; return its message."""
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="test.toml")
    return str(caught.value)


def host_with(**keys: str) -> str:
    """A remote host table with extra TOML ``key = value`` lines (values already TOML)."""
    return REMOTE + "".join(f"{key} = {value}\n" for key, value in keys.items())


class TestDefaultConfig:
    def test_watches_local_vllm_units_with_nvml(self) -> None:
        """Without a file, one local host watches vllm*.service through NVML."""
        config = default_config()
        (host,) = config.hosts
        assert host.local
        assert host.address is None
        assert host.units == ("vllm*.service",)
        assert host.gpu is GpuBackend.NVML
        assert host.ssh_settings() is None

    def test_documented_defaults(self) -> None:
        """The defaults are the documented values."""
        config = default_config()
        assert (config.exporter.listen_host, config.exporter.listen_port) == ("127.0.0.1", 9842)
        assert config.defaults.gpu_poll_interval_seconds == 2.0
        assert config.defaults.stall_min_growth_bytes == 256 * 1024 * 1024
        assert config.defaults.backfill_max_records == 200_000
        assert config.defaults.backfill_max_invocations == 3
        assert config.defaults.backfill_max_age_seconds == 86_400
        assert config.defaults.benign_patterns == DEFAULT_BENIGN_PATTERNS
        assert config.defaults.state_directory == "/var/lib/vllm-sentinel"
        assert config.defaults.cursor_flush_interval_seconds == 1.0
        assert config.warnings == ()

    def test_default_stall_thresholds(self) -> None:
        """Each startup phase has the threshold sized for 1T-parameter models."""
        thresholds = default_config().hosts[0].stall_thresholds()
        assert dict(thresholds) == {
            Phase.STARTING: 600,
            Phase.INITIALIZING: 900,
            Phase.LOADING_WEIGHTS: 600,
            Phase.COMPILING: 900,
            Phase.PROFILING_KV_CACHE: 600,
            Phase.CAPTURING_CUDA_GRAPHS: 600,
            Phase.STARTING_API_SERVER: 300,
        }

    def test_thresholds_cover_exactly_the_startup_phases(self) -> None:
        """StallThresholds has one field per startup phase, in phase order."""
        assert list(StallThresholds.model_fields) == [phase.value for phase in STARTUP_PHASES]

    def test_empty_file_equals_default_config(self) -> None:
        """An empty file gives the same Config as no file."""
        assert parse_config("") == default_config()

    def test_config_is_frozen(self) -> None:
        """A Config cannot be changed after validation."""
        config = default_config()
        with pytest.raises(ValueError, match="frozen"):
            config.exporter.listen = "0.0.0.0:1"


class TestExampleFile:
    def test_loads(self) -> None:
        """config.example.toml is a valid config."""
        config = load_config(EXAMPLE)
        assert [host.name for host in config.hosts] == ["llm-one", "llm-two"]

    def test_equals_defaults_except_hosts(self) -> None:
        """The example's [exporter] and [defaults] are exactly the defaults."""
        config = load_config(EXAMPLE)
        assert config.exporter == ExporterConfig()
        assert config.defaults == DefaultsConfig()
        assert config.warnings == ()

    def test_remote_example_sets_every_ssh_key_to_its_default(self) -> None:
        """The remote example host shows each SSH key with its default value (but known_hosts)."""
        remote = load_config(EXAMPLE).hosts[1]
        defaults = HostConfig(name="x", address="h")
        # the service user has no home (docs/security.md): the example keeps it with the config
        assert remote.known_hosts == "/etc/vllm-sentinel/known_hosts"
        for key in (
            "port",
            "insecure_accept_any_host_key",
            "connect_timeout_seconds",
            "keepalive_interval_seconds",
            "keepalive_count_max",
            "passphrase",
        ):
            assert getattr(remote, key) == getattr(defaults, key), key

    @pytest.mark.parametrize(
        "model",
        [
            ExporterConfig,
            DefaultsConfig,
            StallThresholds,
            HostConfig,
            HealthProbeConfig,
            HealthProbeUnitConfig,
        ],
        ids=str,
    )
    def test_documents_every_key(self, model: type[BaseModel]) -> None:
        """Every key of every table appears in the example, set or commented out."""
        text = EXAMPLE.read_text(encoding="utf-8")
        missing = [
            key
            for key in model.model_fields
            if not re.search(rf"^\s*(?:#\s*)?{key}\s*=", text, re.MULTILINE)
        ]
        assert missing == []


class TestParseConfig:
    def test_hosts_inherit_defaults(self) -> None:
        """Hosts take gpu_poll_interval_seconds and stall thresholds from [defaults]."""
        config = parse_config(
            "[defaults]\ngpu_poll_interval_seconds = 5\n"
            "[defaults.stall_threshold_seconds]\ncompiling = 1800\n" + LOCAL
        )
        host = config.hosts[0]
        assert host.gpu_poll_interval_seconds == 5.0
        assert host.stall_thresholds()[Phase.COMPILING] == 1800
        assert host.stall_thresholds()[Phase.STARTING] == 600

    def test_slow_rule_settings_are_inherited_and_checked(self) -> None:
        """slow_factor and slow_floor_seconds: defaults 1.5 and 60, [defaults], a host's own;
        a factor of 1 or less would call every start slow and is refused."""
        assert (
            parse_config(LOCAL).hosts[0].slow_factor,
            parse_config(LOCAL).hosts[0].slow_floor_seconds,
        ) == (1.5, 60.0)
        config = parse_config(
            "[defaults]\nslow_factor = 2.0\nslow_floor_seconds = 300.0\n"
            + LOCAL
            + '[[hosts]]\nname = "b"\nlocal = true\nslow_factor = 3.0\n'
        )
        assert [(h.slow_factor, h.slow_floor_seconds) for h in config.hosts] == [
            (2.0, 300.0),
            (3.0, 300.0),
        ]
        message = config_error("[defaults]\nslow_factor = 1.0\n" + LOCAL)
        assert "defaults.slow_factor" in message

    def test_host_overrides_merge_with_defaults(self) -> None:
        """A host's own thresholds win per phase; the rest still come from [defaults]."""
        config = parse_config(
            "[defaults.stall_threshold_seconds]\ncompiling = 1800\nstarting = 60\n"
            + LOCAL
            + "gpu_poll_interval_seconds = 0.5\n"
            + "stall_threshold_seconds = { starting = 30, loading_weights = 3600 }\n"
        )
        thresholds = config.hosts[0].stall_thresholds()
        assert thresholds[Phase.STARTING] == 30
        assert thresholds[Phase.LOADING_WEIGHTS] == 3600
        assert thresholds[Phase.COMPILING] == 1800
        assert config.hosts[0].gpu_poll_interval_seconds == 0.5

    def test_gpu_defaults_to_nvml_locally_and_nvidia_smi_remotely(self) -> None:
        """gpu defaults by host kind: nvml for local, nvidia-smi for remote."""
        config = parse_config(LOCAL + REMOTE)
        assert [host.gpu for host in config.hosts] == [GpuBackend.NVML, GpuBackend.NVIDIA_SMI]

    def test_local_host_may_use_nvidia_smi_or_none(self) -> None:
        """A local host may read GPUs with nvidia-smi, or not at all."""
        config = parse_config(
            LOCAL + 'gpu = "none"\n' + LOCAL.replace('"a"', '"b"') + 'gpu = "nvidia-smi"\n'
        )
        assert [host.gpu for host in config.hosts] == [GpuBackend.NONE, GpuBackend.NVIDIA_SMI]

    def test_remote_host_ssh_settings(self) -> None:
        """ssh_settings carries every SSH key of a remote host."""
        config = parse_config(
            host_with(
                port="2222",
                user='"sentinel"',
                client_keys='["/k/id_ed25519"]',
                known_hosts='"/etc/ssh/known"',
                connect_timeout_seconds="3",
                keepalive_interval_seconds="5",
                keepalive_count_max="2",
                passphrase=f'"{SECRET}"',
            )
        )
        assert config.hosts[0].ssh_settings() == SshSettings(
            address="10.0.0.5",
            port=2222,
            user="sentinel",
            client_keys=("/k/id_ed25519",),
            known_hosts="/etc/ssh/known",
            insecure_accept_any_host_key=False,
            connect_timeout_seconds=3.0,
            keepalive_interval_seconds=5.0,
            keepalive_count_max=2,
            passphrase=SECRET,
        )

    def test_valid_unit_names_and_globs(self) -> None:
        """Names, template instances, escapes and globs of systemd's grammar are accepted."""
        units = [
            "vllm-kimi-k25.service",
            "vllm@llama3.service",
            "vllm@.service",
            r"vllm-a\x2db.service",
            "vllm:gpu_0.service",
            "vllm-*.service",
            "vllm-?.service",
            "vllm-[ab].service",
            "vllm*",
            "vllm.socket",
        ]
        toml_units = ", ".join(f"'{unit}'" for unit in units)
        config = parse_config(LOCAL + f"units = [{toml_units}]\n")
        assert config.hosts[0].units == tuple(units)

    def test_allowed_journalctl_args(self) -> None:
        """Options that only choose the journal to read are accepted."""
        args = [
            "--directory=/var/log/journal/remote",
            "--file=/var/log/journal/*.journal",
            "--root=/mnt/root",
            "--machine=box",
            "--namespace=vllm",
            "--merge",
            "-m",
            "--user",
            "--system",
        ]
        toml_args = ", ".join(f'"{arg}"' for arg in args)
        config = parse_config(LOCAL + f"journalctl_args = [{toml_args}]\n")
        assert config.hosts[0].journalctl_args == tuple(args)

    @pytest.mark.parametrize(
        ("arg", "why"),
        [
            ("--root=-x", "must not start with '-'"),
            ("--directory=-rf", "must not start with '-'"),
            ("--machine=-x", "must not start with '-'"),
            ("--namespace=--all", "must not start with '-'"),
            ("--directory=var/log/journal", "must be an absolute path"),
            ("--root=relative", "must be an absolute path"),
            ("--directory=/var/log/*", "without globs"),
            ("--machine=a/b", "must be a name"),
            ("--namespace=a b", "whitespace is not allowed"),
            ("--image=/tmp/disk.raw", "not an allowed journalctl option"),
            ("--output=cat", "not an allowed journalctl option"),
            ("--directory", "not an allowed journalctl option"),
        ],
        ids=repr,
    )
    def test_option_injection_in_journalctl_args_is_refused(self, arg: str, why: str) -> None:
        """Each allowed option's value is checked for its kind (issue 15 §8: ``--root=-x`` was
        accepted): no value starting with ``-``, paths absolute, names plain."""
        message = config_error(LOCAL + f'journalctl_args = ["{arg}"]\n')
        assert "hosts[0].journalctl_args[0]" in message and why in message

    def test_every_allowed_option_says_why_it_is_there(self) -> None:
        """The allow-list is a table: each option with the kind of value and the reason."""
        assert set(JOURNALCTL_OPTIONS) == {
            "--directory",
            "--file",
            "--root",
            "--machine",
            "--namespace",
        }
        assert all(kind and why for kind, why in JOURNALCTL_OPTIONS.values())
        args = ["--namespace=*", "--namespace=+vllm", "--file=/var/log/journal/*/*.journal"]
        toml_args = ", ".join(f'"{arg}"' for arg in args)
        config = parse_config(LOCAL + f"journalctl_args = [{toml_args}]\n")
        assert config.hosts[0].journalctl_args == tuple(args)

    def test_listen_forms(self) -> None:
        """listen accepts IPv4, bracketed IPv6, a host name and ':port'."""
        assert parse_listen_address("127.0.0.1:9842") == ("127.0.0.1", 9842)
        assert parse_listen_address("[::1]:9842") == ("::1", 9842)
        assert parse_listen_address("monitor.example:1") == ("monitor.example", 1)
        assert parse_listen_address(":65535") == ("", 65535)

    def test_load_config_reads_a_file(self, tmp_path: Path) -> None:
        """load_config parses the file at the path."""
        path = tmp_path / "c.toml"
        path.write_text('[exporter]\nlisten = "[::1]:9000"\n', encoding="utf-8")
        exporter = load_config(path).exporter
        assert (exporter.listen_host, exporter.listen_port) == ("::1", 9000)


HOSTILE_UNITS = [
    ("vllm; touch /tmp/pwned", "';' is not allowed"),
    ("$(id)", "'$' is not allowed"),
    ("`id`.service", "'`' is not allowed"),
    ("vllm\n.service", "a newline is not allowed"),
    ("vllm .service", "whitespace is not allowed"),
    ("vllm'x.service", '"\'" is not allowed'),
    ('vllm"x.service', "'\"' is not allowed"),
    ("vllm|x.service", "'|' is not allowed"),
    ("vllm\x1b.service", "the control character '\\x1b' is not allowed"),
]


class TestUnitNames:
    @pytest.mark.parametrize(("unit", "reason"), HOSTILE_UNITS, ids=repr)
    def test_hostile_names_rejected(self, unit: str, reason: str) -> None:
        """Shell syntax, whitespace and control characters never pass as unit names."""
        toml_unit = unit.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        toml_unit = toml_unit.replace("\x1b", "\\u001b")
        message = config_error(LOCAL + f'units = ["{toml_unit}"]\n')
        assert (
            f"hosts[0].units[0]: {unit!r} is not a valid systemd unit name or glob: {reason}"
            in message
        )

    def test_error_names_the_host_and_index(self) -> None:
        """The path points at the exact host and list position."""
        message = config_error(
            LOCAL + REMOTE + 'units = ["vllm.service", "vllm; touch /tmp/pwned"]\n'
        )
        assert (
            "hosts[1].units[1]: 'vllm; touch /tmp/pwned' is not a valid systemd unit name or glob"
            in message
        )

    @pytest.mark.parametrize(
        ("unit", "reason"),
        [
            ("vllm", "it needs a unit type suffix such as '.service' (write 'vllm.service')"),
            ("vllm.servic", "it needs a unit type suffix"),
            ("vllm-*.conf", "a glob must end with a unit type such as '.service', or '*'"),
            ("-.service", "it must not start with '-'"),
            ("a@b@c.service", "at most one '@' is allowed"),
            ("@x.service", "the name before '@' or the suffix is empty"),
            (".service", "the name before '@' or the suffix is empty"),
            ("vllm-[ab.service", "'[' and ']' must pair up"),
            ("", "it is empty"),
            ("v" * 250 + ".service", "longer than 255 characters"),
        ],
        ids=lambda value: value[:20],
    )
    def test_grammar_violations_rejected(self, unit: str, reason: str) -> None:
        """Names outside systemd's unit-name grammar are rejected with the reason."""
        message = config_error(LOCAL + f'units = ["{unit}"]\n')
        assert f"hosts[0].units[0]: {unit!r} is not a valid systemd unit name or glob" in message
        assert reason in message

    def test_empty_unit_list_rejected(self) -> None:
        """A host must watch at least one unit."""
        assert "hosts[0].units: list at least one unit name or glob" in config_error(
            LOCAL + "units = []\n"
        )


class TestJournalctlArgs:
    @pytest.mark.parametrize(
        ("arg", "fragment"),
        [
            ("--output=cat", "'--output=cat' is not an allowed journalctl option (allowed: "),
            ("-f", "'-f' is not an allowed journalctl option"),
            ("--after-cursor=x", "is not an allowed journalctl option"),
            ("--merge=1", "'--merge=1' is not an allowed journalctl option"),
            ("--directory", "'--directory' is not an allowed journalctl option"),
            ("--directory=", "'--directory=': the option needs a value after '='"),
            ("--file=/x;rm -rf /", "whitespace is not allowed"),
            ("--file=/x;rm", "'--file=/x;rm': ';' not allowed in the value"),
            ("--root=$(id)", "'$', '(', ')' not allowed in the value"),
            ("--machine=a\nb", "a newline is not allowed"),
        ],
        ids=repr,
    )
    def test_unsafe_args_rejected(self, arg: str, fragment: str) -> None:
        """Only allow-listed options with plain values pass."""
        toml_arg = arg.replace("\n", "\\n")
        message = config_error(LOCAL + f'journalctl_args = ["--merge", "{toml_arg}"]\n')
        assert "hosts[0].journalctl_args[1]: " in message
        assert fragment in message


class TestHosts:
    def test_local_and_address_are_exclusive(self) -> None:
        """A host cannot be both local and remote."""
        message = config_error(LOCAL + 'address = "10.0.0.5"\n')
        assert "hosts[0].address: set either local = true or address, not both" in message

    def test_local_or_address_required(self) -> None:
        """A host with neither local nor address is rejected."""
        message = config_error('[[hosts]]\nname = "a"\n')
        assert (
            "hosts[0].address: a host needs local = true or an address to reach it over SSH"
            in message
        )

    def test_name_required(self) -> None:
        """Every host table needs a name."""
        assert "hosts[0].name: required key is missing" in config_error("[[hosts]]\nlocal = true\n")

    @pytest.mark.parametrize("name", ["bad name", "", "x" * 65, "a/b", 'a"b'], ids=repr)
    def test_invalid_names_rejected(self, name: str) -> None:
        """Host names must be valid label values."""
        toml_name = name.replace('"', '\\"')
        message = config_error(f'[[hosts]]\nname = "{toml_name}"\nlocal = true\n')
        assert f"hosts[0].name: {name!r} is not a valid host name" in message

    def test_duplicate_names_rejected(self) -> None:
        """Two hosts with one name are rejected at the second."""
        message = config_error(LOCAL + REMOTE.replace('"r"', '"a"'))
        assert "hosts[1].name: host name 'a' is used by an earlier host" in message

    def test_duplicate_names_rejected_when_built_in_code(self) -> None:
        """Config built from HostConfig objects also refuses duplicate names."""
        host = HostConfig(name="a", local=True)
        with pytest.raises(ValueError, match="host names must be unique: a"):
            Config(hosts=(host, host))

    def test_nvml_on_remote_host_rejected(self) -> None:
        """NVML cannot read a remote host's GPUs; the error says to use nvidia-smi."""
        message = config_error(host_with(gpu='"nvml"'))
        assert (
            'hosts[0].gpu: gpu = "nvml" reads only this machine\'s GPUs; '
            'use gpu = "nvidia-smi" for a remote host'
        ) in message

    def test_unknown_gpu_backend_rejected(self) -> None:
        """gpu must be one of nvml, nvidia-smi, none."""
        message = config_error(LOCAL + 'gpu = "rocm"\n')
        assert "hosts[0].gpu: Input should be 'nvml', 'nvidia-smi' or 'none'" in message

    def test_ssh_keys_on_local_host_rejected(self) -> None:
        """SSH settings on a local host are a mistake and are named."""
        message = config_error(LOCAL + 'port = 2222\nuser = "x"\n')
        assert "hosts[0].port: applies to remote hosts only (this host is local = true)" in message
        assert "hosts[0].user: applies to remote hosts only" in message

    def test_remote_host_without_known_hosts_rejected(self) -> None:
        """An empty known_hosts needs the explicit insecure switch."""
        message = config_error(host_with(known_hosts='""'))
        assert (
            "hosts[0].known_hosts: a remote host needs a known_hosts file "
            "(or insecure_accept_any_host_key = true)"
        ) in message

    def test_insecure_host_key_accepted_with_loud_warning(self) -> None:
        """insecure_accept_any_host_key is allowed but warned about."""
        config = parse_config(host_with(known_hosts='""', insecure_accept_any_host_key="true"))
        (warning,) = config.warnings
        assert warning.startswith("INSECURE: hosts[0] (r): insecure_accept_any_host_key = true")
        settings = config.hosts[0].ssh_settings()
        assert settings is not None
        assert settings.insecure_accept_any_host_key
        assert settings.known_hosts is None

    @pytest.mark.parametrize(
        ("key", "value", "fragment"),
        [
            (
                "address",
                '"-oProxyCommand=x"',
                "'-oProxyCommand=x' is not a valid host name or IP address",
            ),
            ("address", '"a b"', "'a b' is not a valid host name or IP address"),
            ("user", '"-l"', "'-l' is not a valid user name"),
            ("port", "0", "Input should be greater than or equal to 1"),
            ("port", "65536", "Input should be less than or equal to 65535"),
            ("port", '"22"', "Input should be a valid integer, not a string"),
            ("connect_timeout_seconds", "0", "Input should be greater than 0"),
            ("keepalive_count_max", "0", "Input should be greater than or equal to 1"),
            ("client_keys", '"/k"', "should be an array, not a string"),
            ("insecure_accept_any_host_key", "1", "Input should be a valid boolean"),
            ("gpu_poll_interval_seconds", "nan", "Input should be a finite number"),
        ],
        ids=lambda value: str(value)[:24],
    )
    def test_invalid_ssh_values_named(self, key: str, value: str, fragment: str) -> None:
        """Each bad SSH value is reported at its key."""
        if key == "address":
            text = f'[[hosts]]\nname = "r"\naddress = {value}\n'
        else:
            text = host_with(**{key: value})
        message = config_error(text)
        assert f"hosts[0].{key}: {fragment}" in message

    def test_no_hosts_rejected(self) -> None:
        """An explicitly empty host list is an error, unlike a missing one."""
        assert "hosts: list at least one [[hosts]] table" in config_error("hosts = []\n")


class TestExporter:
    @pytest.mark.parametrize(
        ("listen", "fragment"),
        [
            ("9842", "expected host:port, e.g. 127.0.0.1:9842 or [::1]:9842"),
            ("127.0.0.1:0", "port 0 is not in 1-65535"),
            ("127.0.0.1:65536", "port 65536 is not in 1-65535"),
            ("127.0.0.1:http", "expected host:port"),
            ("::1:9842", "write an IPv6 address in brackets"),
            ("[zz::1]:9842", "'zz::1' is not an IPv6 address"),
            ("a b:9842", "'a b' is not a host name or IPv4 address"),
        ],
        ids=repr,
    )
    def test_bad_listen_rejected(self, listen: str, fragment: str) -> None:
        """listen must be host:port with a port in 1-65535."""
        message = config_error(f'[exporter]\nlisten = "{listen}"\n')
        assert f"exporter.listen: {listen!r}: {fragment}" in message

    def test_tls_files_come_in_pairs(self) -> None:
        """A certificate without a key (or the reverse) is rejected."""
        for key in ("tls_cert_file", "tls_key_file"):
            message = config_error(f'[exporter]\n{key} = "/x.pem"\n')
            assert (
                "exporter.tls_key_file: set tls_cert_file and tls_key_file together, or neither"
                in message
            )

    def test_web_config_excludes_tls_files(self) -> None:
        """TLS is configured in one place: web_config_file or the file pair."""
        message = config_error(
            '[exporter]\ntls_cert_file = "/c"\ntls_key_file = "/k"\nweb_config_file = "/w.yml"\n'
        )
        assert "exporter.web_config_file: set either web_config_file" in message

    def test_public_listen_without_protection_warns(self) -> None:
        """Listening beyond loopback without TLS or auth is accepted with a warning."""
        config = parse_config('[exporter]\nlisten = "0.0.0.0:9842"\n')
        assert any("exporter.listen = '0.0.0.0:9842'" in text for text in config.warnings)
        protected = parse_config(
            '[exporter]\nlisten = "0.0.0.0:9842"\nweb_config_file = "/w.yml"\n'
        )
        assert protected.warnings == ()


class TestDefaults:
    @pytest.mark.parametrize(
        ("pattern", "fragment"),
        [
            ("(", "'(' does not compile as a Python regex: missing ), unterminated subpattern"),
            ("a(?i)", "'a(?i)' does not compile as a Python regex: global flags not at the start"),
            ("", "an empty pattern would match every line"),
        ],
        ids=repr,
    )
    def test_bad_benign_patterns_rejected(self, pattern: str, fragment: str) -> None:
        """Each benign pattern must compile the way BenignMatcher uses it."""
        message = config_error(f"[defaults]\nbenign_patterns = ['ok', '{pattern}']\n")
        assert f"defaults.benign_patterns[1]: {fragment}" in message

    def test_patterns_that_clash_together_rejected(self) -> None:
        """Patterns that compile alone but not joined are reported on the list."""
        message = config_error("[defaults]\nbenign_patterns = ['(?P<x>a)', '(?P<x>b)']\n")
        assert "defaults.benign_patterns: the patterns do not compile together" in message

    @pytest.mark.parametrize(
        ("key", "value", "fragment"),
        [
            ("gpu_poll_interval_seconds", "0", "Input should be greater than or equal to 0.1"),
            ("stall_min_growth_bytes", "-1", "Input should be greater than or equal to 0"),
            ("stall_min_growth_bytes", "1.5", "Input should be a valid integer, not a float"),
            ("backfill_max_records", "0", "Input should be greater than or equal to 1"),
            ("backfill_max_invocations", "0", "Input should be greater than or equal to 1"),
            ("backfill_max_age_seconds", "-5", "Input should be greater than 0"),
            ("state_directory", '""', "String should have at least 1 character"),
            ("cursor_flush_interval_seconds", "inf", "Input should be a finite number"),
        ],
        ids=lambda value: str(value)[:24],
    )
    def test_bad_values_rejected(self, key: str, value: str, fragment: str) -> None:
        """Out-of-range or mistyped defaults are reported at their key."""
        message = config_error(f"[defaults]\n{key} = {value}\n")
        assert f"defaults.{key}: {fragment}" in message

    def test_threshold_must_be_a_positive_number(self) -> None:
        """Thresholds are positive numbers, never strings."""
        message = config_error(
            '[defaults.stall_threshold_seconds]\nstarting = "600"\ncompiling = 0\n'
        )
        assert (
            "defaults.stall_threshold_seconds.starting: Input should be a valid number, "
            "not a string"
        ) in message
        assert (
            "defaults.stall_threshold_seconds.compiling: Input should be greater than 0" in message
        )

    def test_bad_defaults_reported_once(self) -> None:
        """An invalid default is reported at [defaults], not again at every host."""
        message = config_error(
            "[defaults.stall_threshold_seconds]\nstarting = -1\n" + LOCAL + REMOTE
        )
        assert "defaults.stall_threshold_seconds.starting" in message
        assert "hosts[" not in message


class TestErrors:
    def test_all_errors_reported_together(self) -> None:
        """One ConfigError lists every invalid key, in file order, with a count."""
        message = config_error(
            '[exporter]\nlisten = "nowhere"\n'
            "[defaults]\nbackfill_max_records = 0\n"
            + LOCAL
            + 'units = ["ok.service", "$(id)"]\n'
            + REMOTE
            + 'gpu = "nvml"\njournalctl_args = ["--output=cat"]\n'
        )
        lines = message.splitlines()
        assert lines[0] == "test.toml: 5 invalid keys"
        assert [line.split(":", 1)[0].strip() for line in lines[1:]] == [
            "exporter.listen",
            "defaults.backfill_max_records",
            "hosts[0].units[1]",
            "hosts[1].journalctl_args[0]",
            "hosts[1].gpu",
        ]

    def test_unknown_keys_named_with_suggestion(self) -> None:
        """A misspelt key is reported with the closest valid one."""
        message = config_error(
            "[exportr]\n[defaults]\ngpu_poll_interval = 1\n"
            + LOCAL
            + 'unit = "vllm.service"\nstall_threshold_seconds = { loading = 1 }\n'
        )
        assert "exportr: unknown key (did you mean 'exporter'?)" in message
        assert (
            "defaults.gpu_poll_interval: unknown key (did you mean 'gpu_poll_interval_seconds'?)"
            in message
        )
        assert "hosts[0].unit: unknown key (did you mean 'units'?)" in message
        assert "hosts[0].stall_threshold_seconds.loading: unknown key" in message

    def test_phase_outside_startup_rejected(self) -> None:
        """Only startup phases have stall thresholds."""
        message = config_error("[defaults.stall_threshold_seconds]\nready = 5\n")
        assert "defaults.stall_threshold_seconds.ready: unknown key" in message

    def test_wrong_table_types_named(self) -> None:
        """A scalar where a table or array belongs is reported by kind."""
        message = config_error('exporter = "x"\nhosts = "y"\n')
        assert "exporter: should be a table, not a string" in message
        assert "hosts: should be an array, not a string" in message

    def test_toml_syntax_error_has_line_and_column(self) -> None:
        """Broken TOML becomes a ConfigError naming line and column."""
        message = config_error('[exporter]\nlisten = "a"\nport = \n')
        assert message.startswith("test.toml: invalid TOML: ")
        assert "(at line 3, column 8)" in message

    def test_missing_file(self, tmp_path: Path) -> None:
        """An unreadable path is a ConfigError naming it."""
        path = tmp_path / "absent.toml"
        with pytest.raises(ConfigError, match=r"absent\.toml: cannot read: No such file"):
            load_config(path)

    def test_non_utf8_file(self, tmp_path: Path) -> None:
        """A file that is not UTF-8 is a ConfigError."""
        path = tmp_path / "latin1.toml"
        path.write_bytes(b'[exporter]\nlisten = "\xe9"\n')
        with pytest.raises(ConfigError, match="not UTF-8 text"):
            load_config(path)


class TestRedaction:
    def config(self) -> Config:
        """A config with a passphrase on its remote host."""
        return parse_config(LOCAL + host_with(passphrase=f'"{SECRET}"'))

    def test_repr_hides_passphrase(self) -> None:
        """repr and str of the config, host and SSH settings never show the passphrase."""
        config = self.config()
        settings = config.hosts[1].ssh_settings()
        assert settings is not None and settings.passphrase == SECRET
        for text in (repr(config), str(config), repr(config.hosts[1]), repr(settings)):
            assert SECRET not in text

    def test_redacted_hides_passphrase(self) -> None:
        """redacted() marks a set passphrase as *** and keeps the rest."""
        data = self.config().redacted()
        assert SECRET not in repr(data)
        assert data["hosts"][1]["passphrase"] == "***"
        assert data["hosts"][1]["address"] == "10.0.0.5"
        assert data["warnings"] == []

    def test_redacted_omits_ssh_keys_of_local_hosts(self) -> None:
        """Local hosts show no SSH settings in /status."""
        local = self.config().redacted()["hosts"][0]
        assert "port" not in local
        assert "passphrase" not in local
        assert local["units"] == ["vllm*.service"]

    def test_errors_never_echo_a_passphrase(self) -> None:
        """A mistyped passphrase is named by type, not by value."""
        message = config_error(REMOTE + "passphrase = 12345678\n" + "port = 0\n")
        assert "hosts[0].passphrase: Input should be a valid string, not an integer" in message
        assert "12345678" not in message


class TestCheckConfig:
    def test_summarises_valid_file(self, tmp_path: Path) -> None:
        """check_config lists the exporter, hosts and units."""
        path = tmp_path / "c.toml"
        path.write_text(LOCAL + 'units = ["vllm-a.service", "vllm-*.service"]\n', encoding="utf-8")
        assert check_config(path) == [
            f"{path}: OK",
            "exporter: listening on 127.0.0.1:9842 (plain HTTP, no authentication)",
            "hosts: 1, unit names or globs: 2",
            "  a: local, gpu nvml, units vllm-a.service, vllm-*.service",
        ]

    def test_reports_warnings_and_missing_files(self, tmp_path: Path) -> None:
        """Insecure settings and files that are not there are warnings."""
        key = tmp_path / "id_ed25519"
        key.write_text("key", encoding="utf-8")
        path = tmp_path / "c.toml"
        path.write_text(
            host_with(
                user='"sentinel"',
                insecure_accept_any_host_key="true",
                client_keys=f'["{key}", "{tmp_path}/absent"]',
            ),
            encoding="utf-8",
        )
        lines = check_config(path)
        assert "  r: ssh sentinel@10.0.0.5:22, gpu nvidia-smi, units vllm*.service" in lines
        warnings = [line for line in lines if line.startswith("warning: ")]
        assert len(warnings) == 2
        assert warnings[0].startswith("warning: INSECURE: hosts[0] (r)")
        assert warnings[1] == (
            f"warning: hosts[0].client_keys[1]: file '{tmp_path}/absent' does not exist "
            "or is not readable here"
        )

    def test_invalid_file_raises(self, tmp_path: Path) -> None:
        """An invalid file raises ConfigError for the CLI to report."""
        path = tmp_path / "c.toml"
        path.write_text("hosts = []\n", encoding="utf-8")
        with pytest.raises(ConfigError, match="hosts: list at least one"):
            check_config(path)


class TestHealthProbeConfig:
    TEXT = """
[defaults.health_probe]
interval_seconds = 3.0
[defaults.health_probe.units."vllm-batch-*.service"]
enabled = false
[[hosts]]
name = "one"
local = true
[hosts.health_probe]
enabled = true
timeout_seconds = 2.0
[hosts.health_probe.units."vllm-kimi.service"]
port = 18000
[[hosts]]
name = "two"
local = true
"""

    def test_off_by_default(self) -> None:
        """Without health_probe tables no unit is probed."""
        policy = default_config().hosts[0].probe_policy()
        assert not policy.is_enabled_anywhere
        assert policy.default == ProbeSettings()

    def test_hosts_and_units_inherit_and_override(self) -> None:
        """Host keys merge over [defaults]; unit tables over their host; first match wins."""
        one, two = parse_config(self.TEXT).hosts
        policy = one.probe_policy()
        assert policy.for_unit("vllm-qwen.service") == ProbeSettings(
            enabled=True, interval_seconds=3.0, timeout_seconds=2.0
        )
        assert policy.for_unit("vllm-kimi.service") == ProbeSettings(
            enabled=True, port=18000, interval_seconds=3.0, timeout_seconds=2.0
        )
        assert policy.for_unit("vllm-batch-7.service").enabled is False
        other = two.probe_policy()
        assert not other.for_unit("vllm-qwen.service").enabled
        assert other.for_unit("vllm-qwen.service").interval_seconds == 3.0

    def test_bad_values_are_named(self) -> None:
        """Ports, intervals, unknown keys and unit patterns are checked with their paths."""
        text = """
[[hosts]]
name = "one"
local = true
[hosts.health_probe]
port = 70000
interval_seconds = 0.1
timeout = 3
[hosts.health_probe.units."vllm; rm.service"]
port = 1
"""
        with pytest.raises(ConfigError) as error:
            parse_config(text)
        message = str(error.value)
        assert "4 invalid keys" in message
        assert "hosts[0].health_probe.port: Input should be less than or equal to 65535" in message
        assert (
            "hosts[0].health_probe.interval_seconds: Input should be greater than or equal to 0.5"
            in message
        )
        assert (
            "hosts[0].health_probe.timeout: unknown key (did you mean 'timeout_seconds'?)"
            in message
        )
        assert "is not a valid systemd unit name or glob" in message


def _hosts(count: int, shard: str | None = None) -> str:
    head = f'shard = "{shard}"\n' if shard else ""
    return head + "".join(
        f'[[hosts]]\nname = "gpu-{index:03d}"\naddress = "10.0.{index // 250}.{index % 250}"\n'
        "insecure_accept_any_host_key = true\n"
        for index in range(count)
    )


class TestShard:
    """``shard = "i/n"``: instances sharing one host list each watch a part, every host once."""

    @pytest.mark.parametrize(
        ("text", "parsed"), [("1/1", (1, 1)), ("2/3", (2, 3)), ("7/7", (7, 7))]
    )
    def test_parses(self, text: str, parsed: tuple[int, int]) -> None:
        """i/n with 1 <= i <= n."""
        assert parse_shard(text) == parsed

    @pytest.mark.parametrize(
        ("text", "reason"),
        [
            ("0/3", "the shard must be 1-3"),
            ("4/3", "the shard must be 1-3"),
            ("1/0", "the number of shards must be 1-1024"),
            ("1/2000", "the number of shards must be 1-1024"),
            ("1-3", 'expected "i/n"'),
            ("a/3", 'expected "i/n"'),
            ("1/ 3", 'expected "i/n"'),
            ("١/٣", 'expected "i/n"'),  # Arabic-Indic digits: isdigit, not ASCII
        ],
    )
    def test_refuses(self, text: str, reason: str) -> None:
        """A bad shard is a config error naming the key and what is wrong."""
        message = config_error(f'shard = "{text}"\n' + LOCAL)
        assert message.splitlines()[1].startswith(f"  shard: {text!r}: ")
        assert reason in message

    def test_every_host_is_watched_by_exactly_one_instance(self) -> None:
        """The n instances of one host list partition it; the default watches everything."""
        text = _hosts(200)
        assert len(parse_config(text).watched_hosts) == 200
        parts = [
            {host.name for host in parse_config(_hosts(200, f"{i}/3")).watched_hosts}
            for i in (1, 2, 3)
        ]
        assert sum(len(part) for part in parts) == 200
        assert set.union(*parts) == {f"gpu-{index:03d}" for index in range(200)}
        assert all(50 <= len(part) <= 84 for part in parts), [len(p) for p in parts]

    def test_the_hash_is_stable(self) -> None:
        """The same name lands on the same shard in every process and release: SHA-256 of
        "j/name", pinned here, never Python's per-process hash()."""
        assert shard_of("gpu-000", 1) == 1
        assert [shard_of(name, 3) for name in ("a", "b", "c", "d", "e")] == [1, 2, 1, 2, 2]

    def test_one_more_shard_moves_only_its_hosts(self) -> None:
        """Going from 3 to 4 shards moves only the hosts the new shard takes (rendezvous)."""
        names = [f"gpu-{index:03d}" for index in range(400)]
        moved = [name for name in names if shard_of(name, 3) != shard_of(name, 4)]
        assert all(shard_of(name, 4) == 4 for name in moved)
        assert 60 <= len(moved) <= 140  # about a quarter

    def test_check_config_names_the_watched_hosts_and_warns_on_an_empty_shard(
        self, tmp_path: Path
    ) -> None:
        """check-config says how many hosts this shard watches; none is a warning."""
        path = tmp_path / "c.toml"
        path.write_text(_hosts(6, "2/3"), encoding="utf-8")
        watched = [host.name for host in load_config(path).watched_hosts]
        lines = check_config(path)
        assert f"shard 2/3: watches {len(watched)} of 6 hosts: {', '.join(watched)}" in lines
        path.write_text(_hosts(1, "1/2").replace("gpu-000", _name_on_shard(2, 2)), encoding="utf-8")
        warnings = [line for line in check_config(path) if line.startswith("warning: shard")]
        assert warnings == [
            "warning: shard = '1/2' watches none of the 1 hosts: this instance serves no unit"
        ]

    def test_the_example_documents_it(self) -> None:
        """config.example.toml shows the key with its default."""
        assert re.search(r'^# shard = "1/1"', EXAMPLE.read_text(encoding="utf-8"), re.MULTILINE)


def _name_on_shard(shard: int, count: int) -> str:
    return next(f"h{index}" for index in range(1000) if shard_of(f"h{index}", count) == shard)


class TestCrashSettle:
    """``[defaults] crash_settle_seconds``: how long after its end a crash is counted."""

    def test_default_and_value(self, tmp_path: Path) -> None:
        path = tmp_path / "c.toml"
        path.write_text("[defaults]\ncrash_settle_seconds = 5\n", encoding="utf-8")
        assert load_config(path).defaults.crash_settle_seconds == 5.0
        assert load_config(EXAMPLE).defaults.crash_settle_seconds == 30.0

    @pytest.mark.parametrize("value", ["0", "0.5", "3601", '"30"'])
    def test_out_of_range_is_refused(self, tmp_path: Path, value: str) -> None:
        path = tmp_path / "c.toml"
        path.write_text(f"[defaults]\ncrash_settle_seconds = {value}\n", encoding="utf-8")
        with pytest.raises(ConfigError, match="crash_settle_seconds"):
            load_config(path)
