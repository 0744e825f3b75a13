"""The ssh runner: the measurement worker started on another host over ssh.

The remote host needs nnmeter installed (``pip install -e .`` of the same version) and
the backend's runtime; ``--remote-python`` names its interpreter. The worker speaks the
same JSON lines as a local one over the ssh connection's stdin and stdout, so
everything a local :class:`~nnmeter.backends.Profiler` does holds: a crash or hang is
recorded as a failed measurement and the next job starts a fresh worker (a fresh ssh
session). Differences:

- the models travel inside the requests (the remote cannot read this machine's files)
  and the worker deletes its copy after the job;
- the worker holds the *remote* machine's timing lock (``--timing-lock``), since
  that is where the time is taken, and exits when its ssh session ends
  (``--exit-with-parent``), so a killed connection leaves nothing measuring there;
- ssh runs in batch mode: a key must let it in without a password prompt.

Examples
--------
>>> from nnmeter.farm import RunnerSpec
>>> from nnmeter.farm.ssh import ssh_command
>>> spec = RunnerSpec("ssh", host="me@lab", port=2222, python="/opt/venv/bin/python")
>>> ssh_command(spec, "ort-cpu", "auto")[-9:]                   # doctest: +NORMALIZE_WHITESPACE
['/opt/venv/bin/python', '-m', 'nnmeter.backends.worker', '--backend', 'ort-cpu',
 '--core', 'auto', '--timing-lock', '--exit-with-parent']
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from nnmeter.farm.remote import RemoteProfiler

__all__ = ["SshProfiler", "ssh_command", "REMOTE_ENV"]

#: set for every remote worker (the same as a local worker's defaults)
REMOTE_ENV = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "OPENVINO_TELEMETRY_OPT_OUT": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}


def ssh_command(spec: Any, backend_id: str, core: int | str | None) -> list[str]:
    """The local command line that starts ``backend_id``'s worker on ``spec.host``."""
    cmd = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15",
           "-o", "ServerAliveCountMax=4"]
    if spec.port:
        cmd += ["-p", str(spec.port)]
    if spec.identity:
        cmd += ["-i", str(spec.identity)]
    for opt in spec.ssh_options:
        cmd += ["-o", str(opt)]
    cmd += [str(spec.host), "--"]
    env = {**REMOTE_ENV, **dict(spec.remote_env)}
    remote = ["env"] + [f"{k}={v}" for k, v in sorted(env.items())]
    remote += [spec.python or "python3", "-m", "nnmeter.backends.worker",
               "--backend", backend_id]
    if core is not None:
        remote += ["--core", str(core)]
    remote += ["--timing-lock", "--exit-with-parent"]
    # ssh joins the remote words with spaces for the remote shell: quote each one
    return cmd + [shlex.quote(w) for w in remote]


class SshProfiler(RemoteProfiler):
    """A :class:`~nnmeter.backends.Profiler` whose worker runs on ``spec.host`` over
    ssh (see the module)."""

    kind = "ssh"

    def _command(self) -> list[str]:
        return ssh_command(self.spec, self.backend_id, self.core)

    def _env(self) -> dict[str, str]:
        return dict(os.environ)  # the ssh client's own; the worker's is in the command

    def _start(self) -> None:
        try:
            super()._start()
        except Exception as err:
            from nnmeter.errors import BackendUnavailableError

            raise BackendUnavailableError(
                f"{err} (ssh to {self.spec.host}: check that `ssh {self.spec.host}` logs "
                f"in without a password and that {self.spec.python or 'python3'} there "
                f"has nnmeter and the {self.backend_id} runtime installed)") from err
