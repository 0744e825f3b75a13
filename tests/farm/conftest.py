"""Fixtures with real parts for the farm tests: an sshd on 127.0.0.1 and a small Ray
cluster (a head and two worker nodes, all on this machine)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    """A private sshd on 127.0.0.1 that lets this user in with a throw-away key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.key = folder / "client_key"
        host_key = folder / "host_key"
        for path in (self.key, host_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                           check=True)
        (folder / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        os.chmod(folder / "authorized_keys", 0o600)
        config = folder / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
            f"AuthorizedKeysFile {folder / 'authorized_keys'}", f"PidFile {folder / 'sshd.pid'}",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
            "StrictModes no", "PermitRootLogin prohibit-password", "LogLevel ERROR",
            # the test's environment reaches the worker only through its command line
            "AcceptEnv none", ""]))
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation
        self.log = open(folder / "sshd.log", "wb")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(folder / 'sshd.log').read_text()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            time.sleep(0.1)
        self.user = os.environ.get("USER") or __import__("getpass").getuser()

    def spec(self, **kw):
        from nnmeter.farm import RunnerSpec

        home = tempfile.mkdtemp(prefix="nnmeter-remote-home-")
        env = {"HOME": home, "XDG_CACHE_HOME": os.path.join(home, ".cache"),
               "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
               "NNMETER_TIMING_LOCK": os.environ.get("NNMETER_TIMING_LOCK",
                                                     "/tmp/nnmeter-timing.lock")}
        return RunnerSpec("ssh", host=f"{self.user}@127.0.0.1", port=self.port,
                          identity=str(self.key), python=sys.executable,
                          ssh_options=("StrictHostKeyChecking=no",
                                       "UserKnownHostsFile=/dev/null", "LogLevel=ERROR"),
                          remote_env=env, **kw)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="session")
def sshd():
    if not os.path.exists(SSHD) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        pytest.skip("no sshd/ssh here: install Debian's openssh-server and openssh-client "
                    "(.ci/run does)")
    folder = Path(tempfile.mkdtemp(prefix="nnsshd-"))
    server = Sshd(folder)
    yield server
    server.close()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster():
    """A Ray head (no backends) and two worker nodes on this machine: one offers
    ort-cpu, the other litert-cpu. Yields the cluster's address; the test process
    connects to it as the driver."""
    pytest.importorskip("ray", reason='Ray is not installed: pip install -e ".[farm]"')
    from nnmeter.farm.ray_runner import local_farm

    with local_farm((("ort-cpu",), ("litert-cpu",))) as address:
        yield address


@pytest.fixture
def actor_pids():
    """A function listing the processes of nnmeter's device actors on this machine."""
    return _actor_pids


def _actor_pids() -> list[int]:
    """Processes of nnmeter's device actors on this machine (Ray titles them
    ``ray::_DeviceActor...``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if cmd.startswith("ray::_DeviceActor"):
            pids.append(int(entry))
    return pids


# -- a small build whose configurations do not depend on the times measured ----------
from nnmeter.fusion.rules import FusionRules  # noqa: E402
from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir  # noqa: E402
from nnmeter.sampling.prior import config_key  # noqa: E402

RULES = FusionRules.from_decisions("fake-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})
PRIOR = {
    "conv-bn-relu": [{"h": h, "w": h, "cin": c, "cout": 2 * c, "kernel": 3, "stride": 1,
                      "groups": 1, "pads": None}
                     for h, c in ((28, 16), (28, 24), (14, 32), (14, 48), (7, 64), (7, 96))],
    "relu": [{"h": h, "w": h, "cin": c} for h, c in ((56, 16), (28, 32), (14, 64), (7, 128))],
}
#: a small build whose configurations do not depend on the times measured
SMALL = dict(budget_minutes=5, rules=RULES, prior_configs=PRIOR, progress=False, train=False,
             max_samples_per_type=6, rounds=0, initial_fraction=1.0,
             protocol={"rounds": 2, "round_ms": 5.0, "calibrate": False},
             calibrate_weight_stream=False, calibrate_chain=False, calibrate_in_model=False,
             calibrate_reorders=False, calibrate_boundary=False)


def _rows_of(root, dataset, backend):
    ds = KernelDataset(kernel_dataset_dir(dataset, root), backend)
    return {t: list(ds.rows(t)) for t in ds.kernel_types()}


def _keys_of(rows):
    return sorted((t, config_key(r["config"])) for t, rs in rows.items() for r in rs)


@pytest.fixture(scope="session")
def local_build(tmp_path_factory):
    """The small ort-cpu build's rows, measured locally."""
    from nnmeter.builder import build_predictor

    root = tmp_path_factory.mktemp("local")
    build_predictor("ort-cpu", dataset="ort-cpu", root=root, **SMALL)
    return _rows_of(root, "ort-cpu", "ort-cpu")


@pytest.fixture
def small():
    """Keywords of the small build."""
    return dict(SMALL)


@pytest.fixture
def small_prior():
    return PRIOR


@pytest.fixture
def rows_of():
    return _rows_of


@pytest.fixture
def keys_of():
    return _keys_of
