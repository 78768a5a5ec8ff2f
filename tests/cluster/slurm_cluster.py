"""A real single-node Slurm cluster on this host, with slurmdbd accounting on MariaDB, for the tests of
`spt-hf compare --launcher submitit` (tests/cluster/test_slurm.py, test_slurm_tune.py).

    python tests/cluster/slurm_cluster.py start FOLDER   # installs what is missing (root + apt), prints `export ...`
    python tests/cluster/slurm_cluster.py stop FOLDER

Everything is started by hand (there may be no init system): munged, mariadbd, slurmdbd, slurmctld and slurmd, each
in the foreground as a child of this process (its own session), and stopped by its process id. The configuration
(slurm.conf, slurmdbd.conf) and the daemons' state live in FOLDER; clients find them through SLURM_CONF.

Partitions: `debug` (the default, no time limit) and `short` (MaxTime=3 minutes). QOS `twojobs` allows two submitted
jobs per user (MaxSubmitJobsPerUser=2). Accounting is enforced (associations, limits, QOS).

The same MariaDB server also holds an empty database for Optuna studies (`spt-hf compare --tune --tune_storage`),
dropped and created at each start, for user OPTUNA_USER over TCP at 127.0.0.1:DB_PORT: start() returns its SQLAlchemy
URL as info["optuna_url"] (the script form prints it too).
"""

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ("munge", "mariadb-server", "slurmdbd", "slurmctld", "slurmd", "slurm-client")
DAEMONS = ("munged", "mariadbd", "slurmctld", "slurmd", "slurmdbd", "sinfo", "sacctmgr", "sbatch")
CLUSTER = "spthf"
SHORT_MAX_MIN = 3
DB_PASSWORD = "spthf-test"
DATABASE = "spt_hf_test_acct"  # dropped at each start: job ids restart at 1 with each cluster
DB_PORT = 3306  # MariaDB listens on 127.0.0.1 only
OPTUNA_DATABASE = "spt_hf_test_optuna"  # dropped at each start: every cluster's studies begin empty
OPTUNA_USER = "spthf_optuna"


class ClusterUnavailable(RuntimeError):
    """Slurm cannot be started here (not root, no apt, a package that does not install)."""


def _which(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)), None)


def ensure_packages() -> None:
    """Install Debian's Slurm, munge and MariaDB packages when a daemon is missing (root and apt-get needed)."""
    if all(_which(name) for name in DAEMONS):
        return
    if os.geteuid() != 0:
        raise ClusterUnavailable("the Slurm packages are not installed and installing them needs root")
    if shutil.which("apt-get") is None:
        raise ClusterUnavailable("the Slurm packages are not installed and there is no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise ClusterUnavailable(f"`{' '.join(command)}` failed: {tail[0]}")
    missing = [name for name in DAEMONS if not _which(name)]
    if missing:
        raise ClusterUnavailable(f"after installing {' '.join(PACKAGES)}, still missing: {', '.join(missing)}")


def node_line() -> str:
    """This host's node definition as `slurmd -C` prints it, reachable at 127.0.0.1."""
    out = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("NodeName="))
    return f"{line.strip()} NodeAddr=127.0.0.1 State=UNKNOWN"


def write_config(folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # slurmctld and slurmdbd run as user slurm
    host = socket.gethostname()
    for sub in ("state", "spool", "log"):
        (folder / sub).mkdir(exist_ok=True)
        shutil.chown(folder / sub, "slurm", "slurm")
    node = node_line()
    node_name = node.split()[0].split("=", 1)[1]
    (folder / "slurm.conf").write_text(
        f"""ClusterName={CLUSTER}
SlurmctldHost={host}(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/slurmd-%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=10
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations,limits,qos
JobAcctGatherType=jobacct_gather/none
{node}
PartitionName=debug Nodes={node_name} Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes={node_name} MaxTime={SHORT_MAX_MIN} State=UP
"""
    )
    dbd = folder / "slurmdbd.conf"
    dbd.write_text(
        f"""AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass={DB_PASSWORD}
StorageLoc={DATABASE}
PidFile={folder}/slurmdbd.pid
LogFile={folder}/log/slurmdbd.log
DebugLevel=info
"""
    )
    shutil.chown(dbd, "slurm", "slurm")
    dbd.chmod(0o600)
    return {"SLURM_CONF": str(folder / "slurm.conf")}


def _wait(what: str, check, timeout: float, processes: dict) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                raise ClusterUnavailable(f"{name} exited with status {process.returncode} while waiting for {what}")
        if check():
            return
        time.sleep(0.3)
    raise ClusterUnavailable(f"timed out after {timeout:.0f} s waiting for {what}")


def _ok(command: list[str], env: dict) -> bool:
    return subprocess.run(command, env=env, capture_output=True).returncode == 0


def _run(command: list[str], env: dict) -> str:
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0 and not re.search(r"Nothing new added|already exists", done.stdout + done.stderr):
        raise ClusterUnavailable(f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def create_optuna_database(env: dict) -> str:
    """Drop and create OPTUNA_DATABASE, granted to OPTUNA_USER (with DB_PASSWORD) from localhost and 127.0.0.1;
    returns its SQLAlchemy URL over TCP (`mysql+pymysql://`, the driver of the `tune` extra)."""
    grants = " ".join(
        f"CREATE USER IF NOT EXISTS '{OPTUNA_USER}'@'{host}' IDENTIFIED BY '{DB_PASSWORD}'; "
        f"GRANT ALL ON {OPTUNA_DATABASE}.* TO '{OPTUNA_USER}'@'{host}';"
        for host in ("localhost", "127.0.0.1")
    )
    sql = f"DROP DATABASE IF EXISTS {OPTUNA_DATABASE}; CREATE DATABASE {OPTUNA_DATABASE}; {grants} FLUSH PRIVILEGES;"
    _run(["mariadb", "-e", sql], env)
    return f"mysql+pymysql://{OPTUNA_USER}:{DB_PASSWORD}@127.0.0.1:{DB_PORT}/{OPTUNA_DATABASE}"


def start(folder: str | Path) -> dict:
    """Bring the cluster up in `folder`; returns {"env": {...}, "pids": {...}, "seconds": bring-up time, "folder",
    "optuna_url": the SQLAlchemy URL of an empty database for Optuna studies on the same MariaDB server}."""
    if os.geteuid() != 0:
        raise ClusterUnavailable("starting Slurm's daemons needs root")
    ensure_packages()
    began = time.monotonic()
    folder = Path(folder).resolve()
    env = {**os.environ, **write_config(folder)}
    processes: dict[str, subprocess.Popen] = {}

    def spawn(name: str, command: list[str]) -> None:
        with open(folder / "log" / f"{name}.out", "ab") as log:
            processes[name] = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        (folder / "pids.json").write_text(json.dumps({k: p.pid for k, p in processes.items()}))

    try:
        run_munge = Path("/run/munge")
        run_munge.mkdir(parents=True, exist_ok=True)
        shutil.chown(run_munge, "munge", "munge")
        run_munge.chmod(0o755)  # o+x: clients reach the default socket
        spawn("munged", ["runuser", "-u", "munge", "--", _which("munged"), "-F", "--force"])
        _wait("munge", lambda: _ok([_which("munge"), "-n"], env), 30, processes)

        run_mysql = Path("/run/mysqld")
        run_mysql.mkdir(parents=True, exist_ok=True)
        shutil.chown(run_mysql, "mysql", "mysql")
        if not (Path("/var/lib/mysql") / "mysql").is_dir():
            _run([_which("mariadb-install-db") or "mariadb-install-db", "--user=mysql"], env)
        server = ["--user=mysql", "--skip-networking=0", "--bind-address=127.0.0.1", f"--port={DB_PORT}"]
        spawn("mariadbd", [_which("mariadbd"), *server])
        _wait("MariaDB", lambda: _ok(["mariadb", "-e", "SELECT 1"], env), 60, processes)
        _run(
            [
                "mariadb",
                "-e",
                f"DROP DATABASE IF EXISTS {DATABASE}; "
                f"CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '{DB_PASSWORD}'; "
                f"GRANT ALL ON {DATABASE}.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;",
            ],
            env,
        )

        optuna_url = create_optuna_database(env)

        spawn("slurmdbd", [_which("slurmdbd"), "-D"])
        _wait("slurmdbd", lambda: _ok(["sacctmgr", "-n", "list", "cluster"], env), 60, processes)
        _run(["sacctmgr", "-i", "add", "cluster", CLUSTER], env)
        _run(["sacctmgr", "-i", "add", "account", "tests", f"cluster={CLUSTER}"], env)
        _run(["sacctmgr", "-i", "add", "qos", "twojobs", "MaxSubmitJobsPerUser=2"], env)
        for user in {"root", os.environ.get("USER") or "root"}:
            _run(["sacctmgr", "-i", "add", "user", user, "account=tests", f"cluster={CLUSTER}"], env)
            _run(["sacctmgr", "-i", "modify", "user", user, "set", "qos=normal,twojobs"], env)

        spawn("slurmctld", [_which("slurmctld"), "-D", "-i"])
        spawn("slurmd", [_which("slurmd"), "-D"])

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-p", "debug", "-o", "%t"], env=env, capture_output=True, text=True)
            return out.returncode == 0 and out.stdout.strip() == "idle"

        _wait("the node to be idle in sinfo", idle, 90, processes)
        _wait("sacct", lambda: _ok(["sacct", "-n", "-X", "-j", "1"], env), 30, processes)
    except BaseException:
        stop(folder)
        raise
    info = {
        "env": {"SLURM_CONF": env["SLURM_CONF"]},
        "pids": {k: p.pid for k, p in processes.items()},
        "seconds": round(time.monotonic() - began, 1),
        "folder": str(folder),
        "optuna_url": optuna_url,
    }
    (folder / "cluster.json").write_text(json.dumps(info))
    return info


def our_jobs() -> list[str]:
    """The ids of the jobs queued or running on the cluster (SLURM_CONF names it)."""
    done = subprocess.run(
        ["squeue", "-h", "-t", "PENDING,RUNNING,REQUEUED,SUSPENDED", "-o", "%i"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def stop(folder: str | Path) -> None:
    """Cancel every job, then stop the daemons by their process ids (the reverse of their start)."""
    folder = Path(folder).resolve()
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    pids_file = folder / "pids.json"
    if not pids_file.is_file():
        return
    pids = json.loads(pids_file.read_text())
    if "slurmctld" in pids:
        subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True, timeout=30)
    for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
        pid = pids.get(name)
        if pid is None:
            continue
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            continue
        for _ in range(100):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # started by another process (the script form)
                done = 0 if Path(f"/proc/{pid}").exists() else pid
            if done:
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
    pids_file.unlink()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit("usage: slurm_cluster.py start|stop FOLDER")
    if sys.argv[1] == "stop":
        stop(sys.argv[2])
    else:
        try:
            info = start(sys.argv[2])
        except ClusterUnavailable as error:
            sys.exit(f"slurm_cluster: {error}")
        print(f"export SLURM_CONF={info['env']['SLURM_CONF']}  # up in {info['seconds']} s, pids {info['pids']}")
        print(f"# Optuna studies: --tune_storage {info['optuna_url']}")
