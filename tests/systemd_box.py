"""A real systemd as PID 1 over a Debian bookworm rootfs, for tests/test_systemd.py (issue 31).

No container runtime: ``unshare`` gives systemd its own PID, mount, UTS, IPC and network
namespaces, and it boots (``/lib/systemd/systemd --system``) in a chroot. Commands run inside
with ``nsenter``. The pieces:

- the rootfs comes from ``debootstrap`` (Debian's own packages), built once into a temporary
  folder and renamed into place, under ``/var/cache/harvey-test/rootfs-<key>``: ``ROOTFS_KEY``
  names its suite and packages, so changing them builds a new one;
- every run boots an overlay over it (the cached rootfs is never written) that is a mount point
  of its own, which the hardened unit's mount namespace needs (else 226/NAMESPACE);
- its own network namespace: port 8080 and Ollama's 11434 inside are the box's own, whatever this
  machine runs. pip inside installs from a wheelhouse this machine's pip fills
  (``/var/cache/harvey-test/wheels``, resolved through its usual index and settings), named in the
  box's /etc/pip.conf (sudo drops PIP_* variables);
- ``stop()`` kills the namespace's PID 1 (everything in it goes with it) and unmounts the overlay.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CACHE = Path(os.environ.get("HARVEY_TEST_CACHE", "/var/cache/harvey-test"))
MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
PACKAGES = ["systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "curl", "sudo", "git",
            "ca-certificates", "iproute2"]
ROOTFS_KEY = hashlib.sha256(f"v1 {SUITE} minbase {' '.join(PACKAGES)}".encode()).hexdigest()[:12]
WHEELS_INSIDE = "/var/cache/harvey-wheels"
# The box's LAN address (a veth pair inside its network namespace), which the start-up line must name.
LAN_ADDRESS = "192.168.77.2"
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
             "LANG": "C.UTF-8", "TERM": "dumb"}


def cannot_run() -> str | None:
    """Why this machine cannot boot the box (a skip reason), or None when it can."""
    if os.geteuid() != 0:
        return "needs root: systemd as PID 1 in new namespaces (unshare, overlay mounts)"
    if not shutil.which("unshare"):
        return "unshare (util-linux) is missing"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlay filesystem"
    probe = subprocess.run(["unshare", "-p", "-f", "-m", "-u", "-i", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"this machine cannot make namespaces: {probe.stderr.strip()}"
    return None


def missing_tools() -> list[str]:
    """The Debian packages whose commands the box needs and this machine lacks (scripts/test.sh
    installs them): a failure, not a skip."""
    need = {"debootstrap": "debootstrap", "nsenter": "util-linux", "ip": "iproute2", "git": "git", "chroot": "coreutils"}
    return sorted({package for tool, package in need.items() if not shutil.which(tool)})


def rootfs(log=print) -> Path:
    """The cached Debian rootfs, built with debootstrap when missing (minutes, once)."""
    final = CACHE / f"rootfs-{ROOTFS_KEY}"
    if (final / "lib/systemd/systemd").exists():
        return final
    if not shutil.which("debootstrap"):
        raise RuntimeError("debootstrap is not installed (scripts/test.sh installs it: apt-get install debootstrap)")
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in CACHE.glob("rootfs-*"):             # another key's rootfs: a changed recipe
        shutil.rmtree(old, ignore_errors=True)
    stage = Path(tempfile.mkdtemp(prefix="building-", dir=CACHE))
    t0 = time.monotonic()
    try:
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(stage),
                        MIRROR], check=True, capture_output=True, text=True)
        (stage / "etc/hostname").write_text("harvey-pi\n")
        (stage / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 harvey-pi\n")
        (stage / "etc/machine-id").write_text("")          # systemd makes one at boot
        subprocess.run(["chroot", str(stage), "apt-get", "clean"], check=True, capture_output=True)
        try:
            os.rename(stage, final)
        except OSError:                             # another run built it meanwhile: use that one
            if not (final / "lib/systemd/systemd").exists():
                raise
            shutil.rmtree(stage, ignore_errors=True)
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise RuntimeError(f"debootstrap failed: {exc.stderr[-2000:] if exc.stderr else exc}") from exc
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    log(f"built the Debian {SUITE} rootfs in {time.monotonic() - t0:.0f} s: {final}")
    return final


def wheelhouse(base: Path, requirements: list[str]) -> Path:
    """Wheels for ``requirements`` (plus pip and setuptools) as this machine's pip resolves them for
    the rootfs's own Python (Debian 12's 3.11.2: the newest release of a package may need 3.11.5)."""
    version = subprocess.run(["chroot", str(base), "python3", "-c", "import platform; print(platform.python_version())"],
                             check=True, capture_output=True, text=True).stdout.strip()
    folder = CACHE / f"wheels-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version", version,
               "-d", str(folder), "pip", "setuptools>=68", *requirements]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)
    return folder


class Box:
    """systemd booted over an overlay of the cached rootfs; ``run`` executes inside it."""

    def __init__(self, base: Path, wheels: Path):
        self.base, self.wheels = base, wheels
        self.work = Path(tempfile.mkdtemp(prefix="harvey-box-"))
        self.root = self.work / "root"
        self.proc: subprocess.Popen | None = None
        self.pid = 0
        self._mounted = False

    def boot(self, timeout: float = 120) -> None:
        upper, lower_work = self.work / "upper", self.work / "ovl-work"
        for folder in (self.root, upper, lower_work):
            folder.mkdir()
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={self.base},upperdir={upper},workdir={lower_work}", str(self.root)], check=True)
        self._mounted = True
        (self.root / WHEELS_INSIDE.lstrip("/")).mkdir(parents=True, exist_ok=True)
        # pip's settings for the whole box (sudo drops PIP_* from the environment): the wheelhouse only.
        (self.root / "etc/pip.conf").write_text(f"[global]\nno-index = true\nfind-links = {WHEELS_INSIDE}\n"
                                                "disable-pip-version-check = true\n")
        r = self.root
        script = f"""set -e
mount --make-rprivate /
ip link set lo up
ip link add h0 type veth peer name h1
ip addr add {LAN_ADDRESS}/24 dev h0
ip link set h1 up
ip link set h0 up
hostname harvey-pi
mount --bind {r} {r}
mount -t proc proc {r}/proc
mount -t sysfs sysfs {r}/sys
mount --rbind /dev {r}/dev
mount -t tmpfs -o mode=755 tmpfs {r}/run
mount -t tmpfs -o mode=1777 tmpfs {r}/tmp
mount --bind -o ro {self.wheels} {r}{WHEELS_INSIDE}
exec chroot {r} /lib/systemd/systemd --system --log-target=journal
"""
        self.console = open(self.work / "console.log", "w")
        self.proc = subprocess.Popen(["unshare", "-p", "-f", "-m", "-u", "-i", "-n", "--", "sh", "-c", script],
                                     env={**CLEAN_ENV, "container": "harvey-test"}, stdin=subprocess.DEVNULL,
                                     stdout=self.console, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self.pid:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
            found = children.read_text().split() if children.exists() else []
            if found and Path(f"/proc/{found[0]}/exe").exists() and \
                    os.readlink(f"/proc/{found[0]}/exe").endswith("systemd"):
                self.pid = int(found[0])
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"systemd did not start: {self.console_text()}")
            else:
                time.sleep(0.1)
        while True:          # booted: systemctl answers with running or degraded
            state = self.run("systemctl is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"systemd did not finish booting ({state!r}): {self.console_text()}")
            time.sleep(0.5)

    def console_text(self) -> str:
        self.console.flush()
        return (self.work / "console.log").read_text()[-3000:]

    def run(self, command: str, check: bool = True, timeout: float = 600, env: dict | None = None,
            stdin: str | None = None) -> subprocess.CompletedProcess:
        """``bash -c command`` inside the box, as root, with a clean environment."""
        done = subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-p", "-u", "-i", "-n", "-r", "-w",
                               "/usr/bin/env", "-i", *[f"{k}={v}" for k, v in {**CLEAN_ENV, **(env or {})}.items()],
                               "/bin/bash", "-c", command],
                              capture_output=True, text=True, timeout=timeout, input=stdin)
        if check and done.returncode != 0:
            raise AssertionError(f"inside the box, `{command}` exited {done.returncode}:\n"
                                 f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
        return done

    def stop(self) -> None:
        """Kill the namespace's PID 1 (all of it goes), unmount, remove the overlay. Always safe to call."""
        if self.pid:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(30)
            self.console.close()
        if self._mounted:
            subprocess.run(["umount", "-l", str(self.root)], check=False)
            self._mounted = False
        shutil.rmtree(self.work, ignore_errors=True)
