"""Check, on a benchmark host, the folders a run writes and the data folders its cases read
(standard library only, Python 3.6 or later).

Preflight runs it on the host as ``python3 -m flagperf_host.folders_check REQUEST`` would
(``flagperf.benchmark.piped_script`` sends the ``flagperf_host`` archive with the task, as for
``flagperf_host.data_check``), before anything is shipped or built, so that a folder the ssh
user cannot write or a data file the cases' user cannot read stops the run with one line naming
it, instead of a "Permission denied" in the prepare phase or hours into a round. It runs as the
ssh user (what deploy and the rounds run as) and writes nothing.

* A folder the run writes (``flagperf_root``, ``flagperf_workdir``, and the subfolders of them
  that deploy and the image builds make): where it exists, it must be a folder the user can
  write and enter; where it does not, its nearest existing parent must be, so that it can be
  made. Every folder above it must be traversable.
* A data folder (a round's ``data_dir``): it and every folder above it must be traversable, it
  must be readable, and so must a sample of what it holds: up to ``TOP_SAMPLE`` of its entries
  and, in each sampled folder, up to ``INNER_SAMPLE`` of its entries (the first ones the file
  system lists, no deeper), plus the case's checkpoint file when it names one. A data set of
  millions of files costs a few hundred ``stat`` calls, never a walk of the whole tree; a bad
  entry outside the sample is not seen.
  With runtime ``docker`` the containers run as the ssh user's uid and primary gid alone
  (``playbooks/tasks/container_user.yml``; ``docker run --user UID:GID`` gives the process no
  supplementary groups of the host), so each path is also checked against its mode bits for
  that uid and gid only: a file the user reads through a supplementary group only (a shared
  "datasets" group) is a problem the containers would hit. POSIX ACLs are not read in that
  check (``os.access`` sees them for the user itself).

On the command line::

    python3 -m flagperf_host.folders_check REQUEST
        REQUEST: {"write": [{"setting", "path", "subfolders": [relative, ...]}],
                  "read": [[case_id, data_dir, checkpoint or null], ...],
                  "container": true | false}
        (``checkpoint``: a round's {"path" relative to data_dir, ...} mapping, or null;
        ``container``: the rounds run in containers, runtime docker).
        Prints one line per problem (the host's name is the caller's to add) and exits
        0 (no problem), 1 (problems) or 2 (a bad REQUEST, with one line saying why).
"""

import grp
import json
import os
import posixpath
import pwd
import stat
import sys

PROG = "folders_check"

# Entries of a data folder whose access is checked, and entries of each sampled subfolder:
# a few hundred stat calls at most per data folder, cheap on a network file system too.
TOP_SAMPLE = 64
INNER_SAMPLE = 8

# What a suggested folder under the user's home is named, per setting (inventories/lab's).
HOME_NAMES = {"flagperf_root": "flagperf", "flagperf_workdir": "flagperf-work"}


class Identity(object):
    """Who a check is for: the ssh user (``uid``, all its ``groups``) or, with ``primary_only``,
    a container running as that user's uid and primary gid alone."""

    def __init__(self, primary_only=False):
        self.uid = os.geteuid()
        self.gid = os.getegid()
        self.groups = {self.gid} if primary_only else set(os.getgroups()) | {self.gid}
        self.primary_only = primary_only
        try:
            entry = pwd.getpwuid(self.uid)
            self.name, self.home = entry.pw_name, entry.pw_dir
        except KeyError:
            self.name, self.home = "uid %d" % self.uid, os.environ.get("HOME", "")

    def describe(self):
        if self.primary_only:
            return ("the containers' user %s (uid %d, gid %d, no supplementary groups)"
                    % (self.name, self.uid, self.gid))
        return "user %s" % self.name

    def may(self, path, st, mode):
        """True when this identity may access ``path`` (its ``os.stat`` result ``st``) for
        ``mode`` (``os.R_OK | os.W_OK | os.X_OK`` bits)."""
        if not os.access(path, mode):
            return False
        if not self.primary_only or self.uid == 0:
            return True
        # The permission class the kernel picks: owner, else group, else other.
        if st.st_uid == self.uid:
            shift = 6
        elif st.st_gid in self.groups:
            shift = 3
        else:
            shift = 0
        return (st.st_mode >> shift) & mode == mode


def _owner(st):
    """``user:group, mode 755`` of a stat result, by name where the host knows one."""
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return "owned by %s:%s, mode %o" % (user, group, stat.S_IMODE(st.st_mode))


def _read_only(path):
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _under(path, folder):
    return bool(folder) and folder != "/" and (path == folder or path.startswith(folder.rstrip("/") + "/"))


def _walk_down(path, who):
    """``(deepest, st, blocked)`` for the absolute ``path``: its deepest existing folder or file
    and that one's stat result, and the folder above ``path`` that ``who`` cannot traverse
    (None when every one can)."""
    current = "/"
    st = os.stat(current)
    for part in [p for p in path.split("/") if p]:
        if not stat.S_ISDIR(st.st_mode):
            return current, st, None
        if not who.may(current, st, os.X_OK):
            return current, st, current
        following = posixpath.join(current, part)
        try:
            st_next = os.stat(following)
        except (FileNotFoundError, NotADirectoryError):
            return current, st, None
        current, st = following, st_next
    return current, st, None


def write_problem(setting, path, subfolders, who):
    """The problem of a folder the run writes, one line, or None.

    Args:
        setting: the setting's name (``flagperf_root``), for the message.
        path: its value, an absolute path on this host.
        subfolders: folders under ``path`` that the run makes or writes into (relative).
        who: the ``Identity`` that writes (the ssh user).
    """
    path = posixpath.normpath(path)
    for target in [path] + [posixpath.join(path, s) for s in subfolders]:
        deepest, st, blocked = _walk_down(target, who)
        if blocked is None and not stat.S_ISDIR(st.st_mode):
            return ("%s %s: %s is a file, not a folder; set %s to a folder path"
                    % (setting, path, deepest, setting))
        if blocked is None and who.may(deepest, st, os.W_OK | os.X_OK):
            continue
        where = blocked or deepest
        if where == path:
            place = ""
        elif _under(where, path):
            place = "its subfolder %s " % posixpath.relpath(where, path)
        else:
            place = "parent %s " % where
        if blocked:
            verdict, detail = "not reachable", "%snot traversable: %s" % (place, _owner(st))
        elif _read_only(where):
            verdict, detail = "not writable", "%son a read-only file system" % place
        else:
            verdict, detail = "not writable", "%s%s" % (place, _owner(st))
        suggestion = posixpath.join(who.home, HOME_NAMES.get(setting, "flagperf"))
        if not os.path.isdir(who.home):
            hint = "set %s to a folder user %s can write" % (setting, who.name)
        elif not _under(path, who.home):
            hint = "set %s under the user's home, e.g. %s" % (setting, suggestion)
        else:
            hint = "give %s to user %s (chown) or set %s elsewhere" % (where, who.name, setting)
        return "%s %s: %s by %s (%s); %s" % (setting, path, verdict, who.describe(), detail, hint)
    return None


def _sample(folder, count):
    """Up to ``count`` entries of ``folder`` as ``(path, stat or None)``, in the order the file
    system lists them, without listing the rest (a folder of a million files costs ``count``)."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if len(found) == count:
                break
            try:
                found.append((entry.path, os.stat(entry.path)))
            except OSError:   # a broken link: the layout check's to report, not a permission
                continue
    return found


def read_problem(case_id, data_dir, checkpoint, who):
    """The problem of a round's data folder, one line, or None: the first path in it (or above
    it) that ``who`` cannot read or traverse, with how many more the sample found. A missing
    folder or checkpoint is no problem here: the layout check that follows names it.

    Args:
        case_id: the case, for the message.
        data_dir: the data folder, an absolute path on this host.
        checkpoint: the case's checkpoint (``{"path": relative to data_dir}``) or None.
        who: the ``Identity`` the case's processes run as.
    """
    data_dir = posixpath.normpath(data_dir)
    head = "case %s: data_dir %s: " % (case_id, data_dir)
    deepest, st, blocked = _walk_down(data_dir, who)
    if blocked:
        return "%s%s not traversable by %s: %s" % (head, blocked, who.describe(), _owner(st))
    if deepest != data_dir:   # missing: flagperf_host.data_check says so, in the case's terms
        return None
    unreadable = []

    def check(path, path_st):
        wanted = os.R_OK | os.X_OK if stat.S_ISDIR(path_st.st_mode) else os.R_OK
        if who.may(path, path_st, wanted):
            return True
        unreadable.append((path, path_st))
        return False

    if check(data_dir, st):
        for path, path_st in _sample(data_dir, TOP_SAMPLE) if stat.S_ISDIR(st.st_mode) else []:
            if check(path, path_st) and stat.S_ISDIR(path_st.st_mode):
                for inner, inner_st in _sample(path, INNER_SAMPLE):
                    check(inner, inner_st)
        relative = (checkpoint or {}).get("path") if isinstance(checkpoint, dict) else None
        if relative:
            target = posixpath.join(data_dir, str(relative))
            _, point_st, point_blocked = _walk_down(target, who)
            if point_blocked:
                unreadable.append((point_blocked, point_st))
            elif os.path.exists(target) and target not in [p for p, _ in unreadable]:
                check(target, os.stat(target))   # a missing one is the layout check's
    if not unreadable:
        return None
    path, path_st = unreadable[0]
    more = ("; %d more in the entries sampled" % (len(unreadable) - 1)) if len(unreadable) > 1 else ""
    return "%s%s not readable by %s: %s%s" % (head, path, who.describe(), _owner(path_st), more)


def problems(request):
    """Every problem of ``request`` (see the module's docstring), one line each.

    Raises:
        ValueError: ``request`` is not in that shape.
    """
    if not isinstance(request, dict):
        raise ValueError("REQUEST must be a JSON object of write, read and container")
    writes, reads = request.get("write") or [], request.get("read") or []
    if not isinstance(writes, list) or not all(
            isinstance(w, dict) and isinstance(w.get("setting"), str)
            and isinstance(w.get("path"), str) and w["path"].startswith("/")
            and isinstance(w.get("subfolders", []), list) for w in writes):
        raise ValueError("write must be a list of {setting, path (absolute), subfolders}")
    if not isinstance(reads, list) or not all(
            isinstance(r, list) and len(r) == 3 and isinstance(r[1], str) and r[1].startswith("/")
            for r in reads):
        raise ValueError("read must be a list of [case_id, data_dir (absolute), checkpoint]")
    found = []
    writer = Identity()
    for item in writes:
        problem = write_problem(item["setting"], item["path"],
                                [str(s) for s in item.get("subfolders", [])], writer)
        if problem and problem not in found:
            found.append(problem)
    reader = Identity(primary_only=bool(request.get("container")))
    seen = set()
    for case_id, data_dir, checkpoint in reads:
        if (str(case_id), data_dir) in seen:   # one line per case and folder, not per round
            continue
        seen.add((str(case_id), data_dir))
        problem = read_problem(str(case_id), data_dir, checkpoint, reader)
        if problem:
            found.append(problem)
    return found


def main(argv):
    try:
        if len(argv) != 1:
            raise ValueError("give one argument, the JSON request")
        try:
            request = json.loads(argv[0])
        except ValueError as err:
            raise ValueError("the argument is not JSON (%s)" % err)
        found = problems(request)
    except ValueError as err:
        print("%s: %s" % (PROG, err))
        return 2
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
