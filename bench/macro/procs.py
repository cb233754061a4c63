"""procs: starting the measured process in its own session, waiting for it
with its resource usage, and reading CPU time and memory of a process tree
from /proc (so a tool's helper processes, e.g. heaptrack's interpreter,
are counted with the server they serve)."""
import os
import signal
import socket
import subprocess
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid):
    """Fields after the command name in /proc/PID/stat (index 0 = state), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rfind(")") + 2:].split()


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_seconds(pid):
    """utime + stime of the whole process (its exited threads included)."""
    f = _stat_fields(pid)
    return None if f is None else (int(f[11]) + int(f[12])) / CLK_TCK


def tree(root):
    """root and all its descendants that are alive now."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        f = _stat_fields(int(name))
        if f is not None:
            children.setdefault(int(f[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if os.path.exists("/proc/%d" % pid):
            out.append(pid)
            todo.extend(children.get(pid, []))
    return out


def find_in_tree(root, name):
    """The first process named `name` (comm) in root's tree, or None."""
    for pid in tree(root):
        if comm(pid) == name:
            return pid
    return None


def tree_cpu(root):
    """{pid: CPU seconds} over root's tree."""
    out = {}
    for pid in tree(root):
        c = cpu_seconds(pid)
        if c is not None:
            out[pid] = c
    return out


def tree_cpu_delta(before, after):
    """CPU spent between two tree_cpu snapshots (processes born in between count whole)."""
    return sum(c - before.get(pid, 0.0) for pid, c in after.items())


def thread_cpu(pid):
    """{thread name: CPU seconds} summed over the process's live threads."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        base = "/proc/%d/task/%s" % (pid, tid)
        try:
            with open(base + "/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rfind(")")]
        f = s[s.rfind(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / CLK_TCK
    return out


def memory_kb(pid):
    """{'VmHWM': kB, 'VmRSS': kB} of one process."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                key, _, val = line.partition(":")
                if key in ("VmHWM", "VmRSS"):
                    out[key] = int(val.split()[0])
    except OSError:
        pass
    return out


def tree_rss_kb(root):
    return sum(memory_kb(pid).get("VmRSS", 0) for pid in tree(root))


def launch(cmd, env, log_path, cwd=None):
    """Starts cmd in a new session (so a stuck run can be killed as a group)
    with stdout+stderr to log_path."""
    log = open(log_path, "wb")
    try:
        return subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()


def finish(proc, timeout):
    """Waits for proc; returns (exit status, rusage of it and its waited-for
    descendants). Past the timeout the session is killed and an error raised."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, ru
        if time.monotonic() > deadline:
            kill_session(proc)
            raise RuntimeError("%s did not exit within %d s" % (proc.args[0], timeout))
        time.sleep(0.02)


def kill_session(proc):
    """SIGKILL to the session we created for proc (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.wait4(proc.pid, 0)
    except ChildProcessError:
        pass
    proc.returncode = -9


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, timeout=30.0):
    """Until 127.0.0.1:port accepts; raises if proc exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s before listening" % (proc.args, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listening on port %d after %.0f s" % (port, timeout))


def dir_bytes(path):
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(base, name))
            except OSError:
                pass
    return total


def pinned(cmd, cpu):
    """cmd prefixed with taskset (inherited by every thread and child), or as is."""
    return cmd if cpu is None else ["taskset", "-c", str(cpu)] + cmd
