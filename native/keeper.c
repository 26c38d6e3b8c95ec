/*
 * tether-keeper: runs one command for the tether server and makes sure nothing it starts
 * outlives it.
 *
 * Two ways to start (the server uses the first on Linux):
 *
 *   tether-keeper --zygote [PADDING]   fd 3: a SOCK_SEQPACKET channel from the server. The
 *       zygote keeps one idle keeper forked ahead of need, blocked on that channel. The server
 *       sends a one-byte record carrying five descriptors (SCM_RIGHTS): the idle keeper takes
 *       it, makes them its fds 0-4, leaves its own session and continues as below; once its
 *       command is forked it tells the zygote, which forks the next idle keeper. So a process/start
 *       costs the server a few syscalls: no fork of the server, no exec. PADDING (spaces)
 *       only makes room for each keeper to show its command in `ps`. The zygote exits when
 *       the channel closes; idle keepers too.
 *   tether-keeper                      fds 0-4 set up by the spawner (non-Linux servers).
 *
 * A keeper's descriptors:
 *   0  stdin for the command (a socket)             | with a terminal: input relayed to it,
 *   1  the command's stdout                         | and its output relayed to stdout
 *   2  the command's stderr                         | (then unused: closed)
 *   3  the control socket (below)
 *   4  the start channel: "pid <P> <K>\n" (the command's and the keeper's pids) and, if
 *      it cannot start, "error <STAGE> <ERRNO>\n" (STAGE: chdir, exec, fork, pty, setup);
 *      end of file without an error means exec succeeded
 * and it waits for the command's specification on the control socket.
 *
 * The keeper is a child subreaper (Linux): every descendant of the command whose parent
 * exits — a background job, `setsid -f`, a double fork, `nohup … &` — becomes the keeper's
 * child instead of init's. It reaps them all and stays alive while any remains. When the
 * server asks it to ("kill"), or when the control socket reaches end of file (the server
 * died, however: SIGKILL, OOM, crash), it kills the whole tree and exits. SIGTERM, SIGINT
 * and SIGHUP to the keeper do the same; only SIGKILL/SIGSTOP of the keeper itself escape.
 *
 * Control protocol (ASCII lines, '\n'-terminated):
 *   server -> keeper, first:  "spec <N>\n" then N bytes of NUL-terminated fields: the
 *                             working directory; "" or "<COLS>x<ROWS>" for a terminal; "1"
 *                             or "0" for a stdin (else /dev/null); "-" or "+<argv[0]>";
 *                             the argument count; the program and its arguments; then the
 *                             command's whole environment, NAME=VALUE each (the keeper
 *                             itself runs with none)
 *   server -> keeper, later:  "signal <N>\n"   signal N to the command's process group
 *                             "resize <C> <R>\n" terminal size (TIOCSWINSZ)
 *                             "kill\n"         kill every descendant, report, exit
 *   keeper -> server:         "exit <CODE> <SIGNAL>\n"   the command ended (CODE -1 when
 *                                              killed by SIGNAL); with a terminal, sent once
 *                                              its output is drained and stdout closed
 *
 * Kept mode (issue #27; kept.c): the keeper outlives its server and a successor adopts it.
 * Before the spec the server sends
 *     "keep <ADOPT_MS> <CAP_BYTES> <PATHLEN> <METALEN>\n" then PATH, then META (opaque,
 *     returned at adoption). The keeper listens on the Unix socket PATH (mode 0600, bound
 *     before the start is answered, unlinked when it exits; a failure is "error listen <ERRNO>").
 * Then, unlike the above:
 *   - Output goes through the keeper: the command's stdout and stderr are pipes (with a
 *     terminal: the master, stream 1) read into one retained buffer per stream and forwarded
 *     raw on fd 1 / fd 2. Offsets count from 0 per stream for the process's whole life. The
 *     keeper reads a stream only once all it read from it is forwarded, and only while it
 *     retains less than CAP_BYTES in all (never more: the command then blocks in write(2)).
 *     fd 1 / 2 end once their stream reached end of file and everything is forwarded.
 *   - Stdin is framed on fd 0: "w <LEN> <IDLEN>\n<ID><DATA>" (IDLEN 0: no writeId, at most
 *     1024; LEN at most 64 MiB) and "eof\n" (closes the command's stdin; nothing with a
 *     terminal). A frame is taken once wholly received (counted, its id remembered: the last
 *     4096), then written to the command; fd 0 is read only when that is done. A frame cut
 *     short by end of file is dropped whole. A malformed header ends fd 0.
 *   - keeper -> server: "took <N>\n"  frames taken so far (cumulative, eof included), after
 *                                     every poll iteration that took any
 *     server -> keeper:  "mark <SEQ> <1|2> <END>\n"  the server's entry SEQ covers that stream
 *                                     up to offset END; "mark <SEQ> x\n" / "mark <SEQ> c\n"
 *                                     the exit / close event (marks come in increasing SEQ)
 *                        "drop <SEQ>\n"  frees each stream's bytes below the END of its newest
 *                                     mark <= SEQ (never bytes not yet forwarded) and forgets
 *                                     the marks <= SEQ
 *                        "release\n"  done for good: behave as without keep (exit once the
 *                                     tree is gone, exit reported and output forwarded)
 *                        "kill\n" kills the tree and releases; signal, resize as above
 *   - Control end of file (not released): the tree is NOT killed. The keeper closes fds 0-3
 *     (the dead server's channels), drops a partial stdin frame, keeps the command's stdin
 *     open, keeps reading its output up to CAP_BYTES, and starts the adopt timer (ADOPT_MS,
 *     monotonic). When it ends with no adopter: the tree is killed, the socket unlinked, exit.
 *     While attached, a command whose tree is gone keeps its keeper until release or control
 *     end of file (+ timer). SIGTERM, SIGINT, SIGHUP: kill the tree and exit, as above.
 *   - Adoption: a connection on PATH is taken only while no server is attached and only from
 *     a peer of the keeper's own uid (SO_PEERCRED); any other is closed at once. A server
 *     whose control socket has hung up counts as gone even before its end of file is read
 *     (its last lines are handled first): a successor that connects meanwhile is taken. It receives
 *     one byte 0x01 carrying three descriptors (SCM_RIGHTS): the server's ends of new stdin,
 *     stdout and stderr socket pairs (fds 0-2 again), then the dump below (written blocking,
 *     10 s at most: a successor that fails mid-dump is a control end of file), and is the
 *     control socket from then on (the protocol above; fd 1 / 2 continue after the dump):
 *         "adopted 1\n"
 *         "pid <CMDPID> <KEEPERPID>\n"
 *         "meta <LEN>\n" LEN bytes
 *         "stream 1 <BASE> <LEN>\n" LEN bytes   retained stdout [BASE, BASE+LEN)
 *         "stream 2 <BASE> <LEN>\n" LEN bytes   retained stderr
 *         "mark <SEQ> <1|2> <END>\n" | "mark <SEQ> x|c\n"   every mark kept, in order
 *         "exited <CODE> <SIGNAL>\n"            only if the command ended (as "exit")
 *         "dropped <SEQ>\n"                     the highest seq the server dropped (0: none)
 *         "gone <0|1>\n"                        1: nothing of the tree is left
 *         "stdin <TAKEN> <EOF 0|1>\n"
 *         "id <LEN>\n" LEN bytes                each remembered writeId, oldest first
 *         "end\n"
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "scm-rights.h"

#ifndef MSG_CMSG_CLOEXEC
#define MSG_CMSG_CLOEXEC 0
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

enum { CTL_FD = 3, START_FD = 4 };
enum { STAGE_SETUP = 1, STAGE_FORK, STAGE_PTY, STAGE_CHDIR, STAGE_EXEC, STAGE_LISTEN };
static const char *const STAGE_NAMES[] = {"", "setup", "fork", "pty", "chdir", "exec", "listen"};

/* Relay buffers for --tty; each direction reads only when its buffer is empty (backpressure). */
enum { RELAY_BYTES = 64 * 1024 };
/* After the command exits, the terminal is drained until no output came for this long
   (other processes may still hold it open, so end of file may never come). */
enum { DRAIN_QUIET_MS = 100 };
/* Largest specification accepted on the control socket. */
enum { MAX_SPEC_BYTES = 64 * 1024 * 1024 };

static pid_t command_pid = -1;
static int command_reaped = 0;
static int command_status = 0;
static int exit_sent = 0;
static int have_children = 1;

/* Kept mode (kept.c): a "keep" message came before the spec. */
static int kept = 0;
static int kept_handle_line(const char *line);
static void kept_child_stdio(void);

static int self_pipe[2] = {-1, -1};
static volatile sig_atomic_t stop_requested = 0;

/* Control input: bytes read from fd 3 and not parsed yet. */
static char ctl_buf[4096];
static size_t ctl_len = 0;
static int ctl_open = 1;

/* --tty */
static int tty_mode = 0;
static int master_fd = -1;
static int held_slave_fd = -1;
static int tty_in = -1;  /* fd 0 while relaying input */
static int tty_out = -1; /* fd 1 while relaying output */
static int master_eof = 0;
static char out_buf[RELAY_BYTES];
static size_t out_len = 0, out_off = 0;
static char in_buf[RELAY_BYTES];
static size_t in_len = 0, in_off = 0;
static long long last_output_ms = 0;
static int devnull_fd = -1;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_signal(int sig) {
  int saved = errno;
  if (sig != SIGCHLD) stop_requested = 1;
  char c = (char)sig;
  if (write(self_pipe[1], &c, 1) < 0) { /* full: a wakeup is already pending */ }
  errno = saved;
}

/** Routes `sig` to on_signal (the self-pipe), every other signal blocked while it runs. */
static void catch_signal(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigfillset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

/*
 * write(2) of everything, or -1: EPIPE, the server is gone (the control socket's EOF handles
 * that), or a successor gone or too slow for a kept keeper's dump (SO_SNDTIMEO, kept.c).
 */
static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

static void send_ctl(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void send_ctl(const char *fmt, ...) {
  if (!ctl_open) return;
  char line[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) write_all(CTL_FD, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void set_cloexec(int fd) {
  int flags = fcntl(fd, F_GETFD);
  if (flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

static void set_nonblock(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/*
 * Closes (or, with cloexec, marks close-on-exec) every descriptor from `first` up, except
 * `keep`. close_range(2) where the kernel has it; otherwise the descriptors listed in
 * /proc/self/fd; otherwise every number up to the descriptor limit.
 */
static void close_from(int first, int keep, int cloexec) {
#ifdef SYS_close_range
  if (keep < first) {
    if (syscall(SYS_close_range, (unsigned)first, ~0U, cloexec ? CLOSE_RANGE_CLOEXEC : 0) == 0) return;
  } else {
    int ok = 1;
    if (keep > first) ok = syscall(SYS_close_range, (unsigned)first, (unsigned)keep - 1, cloexec ? CLOSE_RANGE_CLOEXEC : 0) == 0;
    if (ok && syscall(SYS_close_range, (unsigned)keep + 1, ~0U, cloexec ? CLOSE_RANGE_CLOEXEC : 0) == 0) return;
  }
#endif
  DIR *dir = opendir("/proc/self/fd");
  if (dir) {
    int dfd = dirfd(dir);
    int fds[1024];
    size_t n = 0;
    struct dirent *e;
    /* Collect first, act after: closing while iterating would disturb the listing. */
    while ((e = readdir(dir)) != NULL && n < sizeof fds / sizeof fds[0]) {
      char *end;
      long fd = strtol(e->d_name, &end, 10);
      if (*end != '\0' || end == e->d_name || fd < first || fd == keep || fd == dfd) continue;
      fds[n++] = (int)fd;
    }
    int complete = e == NULL;
    closedir(dir);
    for (size_t i = 0; i < n; i++) {
      if (cloexec) set_cloexec(fds[i]);
      else close(fds[i]);
    }
    if (complete) return;
  }
  struct rlimit rl;
  long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 65536;
  for (long fd = first; fd < max; fd++) {
    if (fd == keep) continue;
    if (cloexec) set_cloexec((int)fd);
    else close((int)fd);
  }
}

/* ---- the command's exit ------------------------------------------------------------- */

static void note_reaped(pid_t pid, int status) {
  if (pid == command_pid && !command_reaped) {
    command_reaped = 1;
    command_status = status;
  }
}

/* Reaps every child that has exited; updates have_children. */
static void reap(void) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      note_reaped(pid, status);
      continue;
    }
    if (pid == 0) {
      have_children = 1;
    } else if (errno == ECHILD) {
      have_children = 0;
    } else if (errno == EINTR) {
      continue;
    }
    return;
  }
}

static void send_exit(void) {
  if (exit_sent || !command_reaped) return;
  exit_sent = 1;
  if (WIFSIGNALED(command_status)) send_ctl("exit -1 %d\n", WTERMSIG(command_status));
  else send_ctl("exit %d 0\n", WIFEXITED(command_status) ? WEXITSTATUS(command_status) : -1);
}

/* ---- killing the tree ---------------------------------------------------------------- */

/*
 * The keeper's direct children (including adopted orphans), from the kernel's children list
 * or, without CONFIG_PROC_CHILDREN, from the parent field of every /proc/N/stat. Returns
 * their number (the array is malloc'd into *out), or -1 without /proc.
 */
static long list_children(pid_t **out) {
  size_t cap = 64, n = 0;
  pid_t *pids = malloc(cap * sizeof *pids);
  if (!pids) return -1;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[4096];
    long cur = -1;
    for (;;) {
      ssize_t r = read(fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      for (ssize_t i = 0; i < r; i++) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          cur = (cur < 0 ? 0 : cur * 10) + (buf[i] - '0');
        } else if (cur >= 0) {
          if (n == cap) {
            pid_t *grown = realloc(pids, (cap *= 2) * sizeof *pids);
            if (!grown) break;
            pids = grown;
          }
          pids[n++] = (pid_t)cur;
          cur = -1;
        }
      }
    }
    if (cur >= 0 && n < cap) pids[n++] = (pid_t)cur;
    close(fd);
    *out = pids;
    return (long)n;
  }
  DIR *proc = opendir("/proc");
  if (!proc) {
    free(pids);
    return -1;
  }
  pid_t self = getpid();
  struct dirent *e;
  while ((e = readdir(proc)) != NULL) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end != '\0' || end == e->d_name) continue;
    char stat_path[64], stat[512];
    snprintf(stat_path, sizeof stat_path, "/proc/%ld/stat", pid);
    int sfd = open(stat_path, O_RDONLY | O_CLOEXEC);
    if (sfd < 0) continue;
    ssize_t r = read(sfd, stat, sizeof stat - 1);
    close(sfd);
    if (r <= 0) continue;
    stat[r] = '\0';
    char *paren = strrchr(stat, ')');
    int ppid;
    if (!paren || sscanf(paren + 1, " %*c %d", &ppid) != 1 || ppid != self) continue;
    if (n == cap) {
      pid_t *grown = realloc(pids, (cap *= 2) * sizeof *pids);
      if (!grown) break;
      pids = grown;
    }
    pids[n++] = (pid_t)pid;
  }
  closedir(proc);
  *out = pids;
  return (long)n;
}

/*
 * SIGKILLs every descendant. Only the keeper's own children are signalled: their pids cannot
 * be reused before the keeper reaps them, so nothing outside the tree is ever hit. Once a
 * child has been reaped its own children already belong to the keeper (a subreaper adopts
 * orphans before their parent becomes a zombie), so repeating until no child is left reaches
 * every generation, including processes forked while this runs.
 */
static void kill_tree(void) {
  for (;;) {
    pid_t *pids = NULL;
    long n = list_children(&pids);
    if (n < 0) {
      /* No /proc (not Linux): the command's process group is the best that can be done. */
      if (command_pid > 0) {
        kill(-command_pid, SIGKILL);
        kill(command_pid, SIGKILL);
      }
      for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid > 0) note_reaped(pid, status);
        else if (errno != EINTR) break;
      }
      have_children = 0;
      return;
    }
    if (n == 0) {
      free(pids);
      reap();
      if (!have_children) return;
      continue;
    }
    for (long i = 0; i < n; i++) kill(pids[i], SIGKILL);
    for (long i = 0; i < n; i++) {
      int status;
      pid_t pid;
      do pid = waitpid(pids[i], &status, 0);
      while (pid < 0 && errno == EINTR);
      if (pid > 0) note_reaped(pid, status);
    }
    free(pids);
  }
}

/* ---- control input ------------------------------------------------------------------- */

static void handle_line(char *line) {
  if (kept_handle_line(line)) return;
  if (strcmp(line, "kill") == 0) {
    stop_requested = 1;
  } else if (strncmp(line, "signal ", 7) == 0) {
    int sig = atoi(line + 7);
    if (sig <= 0 || sig >= NSIG || command_pid <= 0) return;
    /* The command's group; the command itself if it left it (and is not reaped yet). */
    if (kill(-command_pid, sig) < 0 && errno == ESRCH && !command_reaped) kill(command_pid, sig);
  } else if (strncmp(line, "resize ", 7) == 0) {
    unsigned cols, rows;
    if (master_fd < 0 || sscanf(line + 7, "%u %u", &cols, &rows) != 2) return;
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    ioctl(master_fd, TIOCSWINSZ, &ws);
  }
}

/* Reads what the control socket has; returns 0 at end of file (the server is gone). */
static int read_ctl(void) {
  ssize_t n;
  do n = read(CTL_FD, ctl_buf + ctl_len, sizeof ctl_buf - ctl_len);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return 1;
  if (n <= 0) return 0;
  ctl_len += (size_t)n;
  size_t start = 0;
  for (size_t i = 0; i < ctl_len; i++) {
    if (ctl_buf[i] != '\n') continue;
    ctl_buf[i] = '\0';
    handle_line(ctl_buf + start);
    start = i + 1;
  }
  if (start == 0 && ctl_len == sizeof ctl_buf) start = ctl_len; /* an absurd line: drop it */
  memmove(ctl_buf, ctl_buf + start, ctl_len - start);
  ctl_len -= start;
  return 1;
}

/* read(2) that waits even if the socket was handed over non-blocking. */
static ssize_t read_wait(int fd, void *buf, size_t len) {
  for (;;) {
    ssize_t n = read(fd, buf, len);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return -1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, -1);
  }
}

struct spec {
  const char *cwd;
  int tty;
  unsigned cols, rows;
  int stdin_pipe;
  const char *file;
  char **argv;
  char **env;
};

/* Blocking read of the "spec <N>\n" header and its N bytes; 0 if the server went away or sent nonsense. */
static int read_spec(struct spec *spec) {
  size_t header_end = 0;
  for (;;) {
    char *nl = memchr(ctl_buf, '\n', ctl_len);
    if (nl) {
      header_end = (size_t)(nl - ctl_buf) + 1;
      break;
    }
    if (ctl_len == sizeof ctl_buf) return 0;
    ssize_t n = read_wait(CTL_FD, ctl_buf + ctl_len, sizeof ctl_buf - ctl_len);
    if (n <= 0) return 0;
    ctl_len += (size_t)n;
  }
  unsigned long size;
  if (sscanf(ctl_buf, "spec %lu", &size) != 1 || size > MAX_SPEC_BYTES) return 0;
  char *blob = malloc(size + 1);
  if (!blob) return 0;
  size_t have = ctl_len - header_end;
  if (have > size) have = size;
  memcpy(blob, ctl_buf + header_end, have);
  memmove(ctl_buf, ctl_buf + header_end + have, ctl_len - header_end - have);
  ctl_len -= header_end + have;
  while (have < size) {
    ssize_t n = read_wait(CTL_FD, blob + have, size - have);
    if (n <= 0) return 0;
    have += (size_t)n;
  }
  blob[size] = '\0';
  size_t count = 0;
  for (size_t i = 0; i < size; i++) count += blob[i] == '\0';
  char **fields = calloc(count + 1, sizeof *fields);
  if (!fields) return 0;
  size_t k = 0;
  for (size_t i = 0; i < size && k < count; i += strlen(blob + i) + 1) fields[k++] = blob + i;
  if (k < 6) return 0;
  spec->cwd = fields[0];
  spec->tty = fields[1][0] != '\0';
  if (spec->tty && sscanf(fields[1], "%ux%u", &spec->cols, &spec->rows) != 2) return 0;
  spec->stdin_pipe = strcmp(fields[2], "1") == 0;
  const char *arg0 = fields[3][0] == '+' ? fields[3] + 1 : NULL;
  unsigned long argc = strtoul(fields[4], NULL, 10);
  if (argc < 1 || argc > k - 5) return 0;
  spec->file = fields[5];
  spec->argv = calloc(argc + 1, sizeof *spec->argv);
  if (!spec->argv) return 0;
  for (unsigned long i = 0; i < argc; i++) spec->argv[i] = fields[5 + i];
  if (arg0) spec->argv[0] = (char *)arg0;
  spec->env = fields + 5 + argc; /* the rest, NULL-terminated by calloc */
  return 1;
}

/* ---- the terminal -------------------------------------------------------------------- */

/* What a terminal emulator sets up (xterm's defaults, as node-pty used them), UTF-8 aware. */
static void terminal_defaults(struct termios *t) {
  memset(t, 0, sizeof *t);
  t->c_iflag = ICRNL | IXON | IXANY | IMAXBEL | BRKINT;
#ifdef IUTF8
  t->c_iflag |= IUTF8;
#endif
  t->c_oflag = OPOST | ONLCR;
  t->c_cflag = CREAD | CS8 | HUPCL;
  t->c_lflag = ICANON | ISIG | IEXTEN | ECHO | ECHOE | ECHOK | ECHOKE | ECHOCTL;
  t->c_cc[VEOF] = 4;
  t->c_cc[VEOL] = 0xff;
  t->c_cc[VEOL2] = 0xff;
  t->c_cc[VERASE] = 0x7f;
  t->c_cc[VWERASE] = 23;
  t->c_cc[VKILL] = 21;
  t->c_cc[VREPRINT] = 18;
  t->c_cc[VINTR] = 3;
  t->c_cc[VQUIT] = 0x1c;
  t->c_cc[VSUSP] = 26;
  t->c_cc[VSTART] = 17;
  t->c_cc[VSTOP] = 19;
  t->c_cc[VLNEXT] = 22;
  t->c_cc[VDISCARD] = 15;
  t->c_cc[VMIN] = 1;
  t->c_cc[VTIME] = 0;
  cfsetispeed(t, B38400);
  cfsetospeed(t, B38400);
}

/* Opens the pseudo-terminal pair (both close-on-exec); returns 0 or an errno. */
static int open_terminal(unsigned cols, unsigned rows) {
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 && errno == EINVAL) master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0) return errno;
  set_cloexec(master);
  char name[128];
  if (grantpt(master) < 0 || unlockpt(master) < 0) goto fail;
#ifdef __linux__
  if (ptsname_r(master, name, sizeof name) != 0) goto fail;
#else
  const char *pts = ptsname(master);
  if (!pts) goto fail;
  snprintf(name, sizeof name, "%s", pts);
#endif
  int slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) goto fail;
  struct termios t;
  terminal_defaults(&t);
  struct winsize ws = {.ws_row = (unsigned short)(rows ? rows : 24), .ws_col = (unsigned short)(cols ? cols : 80)};
  if (tcsetattr(slave, TCSANOW, &t) < 0 || ioctl(slave, TIOCSWINSZ, &ws) < 0) {
    int err = errno;
    close(slave);
    close(master);
    return err;
  }
  set_nonblock(master);
  master_fd = master;
  held_slave_fd = slave;
  return 0;
fail:;
  int err = errno;
  close(master);
  return err;
}

/* ---- starting the command ------------------------------------------------------------ */

/*
 * The start channel (fd 4): how the server learns whether the command started, without the
 * keeper in between. The forked child writes "pid <P> <K>\n" first, and "error <STAGE>
 * <ERRNO>\n" if it cannot become the command; the channel is close-on-exec and the keeper
 * drops its copy right after the fork, so the server's end reaches end of file exactly when
 * exec succeeded (or everything gave up).
 */
static void start_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void start_message(const char *fmt, ...) {
  char line[96];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) write_all(START_FD, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static int start_failed(int stage, int err) {
  start_message("error %s %d\n", STAGE_NAMES[stage], err);
  return 1;
}

static void fail_in_child(int stage) {
  start_failed(stage, errno);
  _exit(127);
}

/* In the forked child: becomes the command. Never returns. */
static void become_command(const struct spec *spec) {
  start_message("pid %d %d\n", (int)getpid(), (int)getppid());
  /* Default dispositions and an empty mask, as if started by a shell. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) sigaction(sig, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);

  /* Its own session and process group: signals reach its group, and with a terminal it is
     the controlling process, as in a terminal emulator. */
  if (setsid() < 0) fail_in_child(STAGE_SETUP);
  if (tty_mode) {
#ifdef TIOCSCTTY
    if (ioctl(held_slave_fd, TIOCSCTTY, 0) < 0) fail_in_child(STAGE_PTY);
#endif
    for (int fd = 0; fd <= 2; fd++)
      if (dup2(held_slave_fd, fd) < 0) fail_in_child(STAGE_PTY);
  } else if (kept) {
    kept_child_stdio();
  } else if (!spec->stdin_pipe && dup2(devnull_fd, 0) < 0) {
    fail_in_child(STAGE_SETUP);
  }
  if (spec->cwd[0] && chdir(spec->cwd) < 0) fail_in_child(STAGE_CHDIR);
  /* Nothing but 0-2 crosses the exec: the start channel is already close-on-exec, and so is
     everything else from here on. */
  close_from(3, -1, 1);
  environ = spec->env;
  execvp(spec->file, spec->argv);
  fail_in_child(STAGE_EXEC);
}

/* ---- the main loop ------------------------------------------------------------------- */

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* Ends the server's stdin/stdout socket but keeps the number taken (by /dev/null). */
static void release_stdio(int *fd) {
  if (*fd < 0) return;
  if (devnull_fd < 0 || dup2(devnull_fd, *fd) < 0) close(*fd);
  *fd = -1;
}

/* The command is gone: release the terminal, stop taking input. */
static void command_done(void) {
  static int done = 0;
  if (done) return;
  done = 1;
  if (!tty_mode) {
    send_exit();
    return;
  }
  /* Our copy of the slave kept the terminal alive for programs that close theirs early;
     without it the master reads end of file once every other holder is gone too. */
  close_fd(&held_slave_fd);
  /* Pending input has nowhere to go; closing fd 0 ends the server's writes. */
  release_stdio(&tty_in);
  in_len = in_off = 0;
  last_output_ms = now_ms();
}

/* With a terminal: once drained after the command's end, close stdout and report. */
static void maybe_finish_terminal(void) {
  if (!tty_mode || !command_reaped || exit_sent) return;
  int drained = master_eof || tty_out < 0 || (out_len == 0 && now_ms() - last_output_ms >= DRAIN_QUIET_MS);
  if (!drained || (out_len > 0 && tty_out >= 0)) return;
  close_fd(&master_fd);
  release_stdio(&tty_out);
  send_exit();
}

static void relay_output(void) {
  if (master_fd >= 0 && out_len == 0 && !master_eof) {
    ssize_t n = read(master_fd, out_buf, sizeof out_buf);
    if (n > 0) {
      out_len = (size_t)n;
      out_off = 0;
      last_output_ms = now_ms();
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      master_eof = 1; /* EIO: every slave descriptor is closed */
    }
  }
  if (tty_out >= 0 && out_len > 0) {
    ssize_t n = write(tty_out, out_buf + out_off, out_len - out_off);
    if (n > 0) {
      out_off += (size_t)n;
      if (out_off == out_len) {
        out_len = out_off = 0;
        last_output_ms = now_ms();
      }
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      release_stdio(&tty_out); /* the server closed its end: discard from now on */
    }
  }
  if (tty_out < 0) out_len = out_off = 0;
}

static void relay_input(void) {
  if (tty_in >= 0 && in_len == 0) {
    ssize_t n = read(tty_in, in_buf, sizeof in_buf);
    if (n > 0) {
      in_len = (size_t)n;
      in_off = 0;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      release_stdio(&tty_in); /* no more input; a pty has no end of file to pass on */
    }
  }
  if (master_fd >= 0 && in_len > 0) {
    ssize_t n = write(master_fd, in_buf + in_off, in_len - in_off);
    if (n > 0) {
      in_off += (size_t)n;
      if (in_off == in_len) in_len = in_off = 0;
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      in_len = in_off = 0;
    }
  }
}

static void drain_self_pipe(void) {
  char buf[64];
  while (read(self_pipe[0], buf, sizeof buf) > 0) {
  }
}

/* ---- the zygote ------------------------------------------------------------------------ */

/* The argv area, rewritten by each keeper to show its command (like setproctitle). */
static char *title_area = NULL;
static size_t title_size = 0;

static void set_title(const struct spec *spec) {
  if (!title_area || title_size < 2) return;
  size_t used = 0;
  const char *prefix = "tether-keeper:";
  for (const char *p = prefix; *p && used + 1 < title_size; p++) title_area[used++] = *p;
  for (char **arg = spec->argv; *arg && used + 1 < title_size; arg++) {
    title_area[used++] = ' ';
    for (const char *p = *arg; *p && used + 1 < title_size; p++) title_area[used++] = *p;
  }
  memset(title_area + used, 0, title_size - used);
}

static int keeper_main(void);

/* A keeper forked by the zygote: tells it, once its command runs, to fork the next idle one. */
static int taken_fd = -1;

static void tell_zygote_taken(void) {
  if (taken_fd < 0) return;
  write_all(taken_fd, "x", 1);
  close_fd(&taken_fd);
}

/*
 * An idle keeper, forked by the zygote: waits for the server's record on the channel (fd 3),
 * takes its five descriptors as 0-4 and becomes a keeper. Never returns.
 */
static void idle_keeper(int taken) {
  taken_fd = taken;
  signal(SIGCHLD, SIG_DFL); /* the zygote's handler is not ours */
  close_fd(&self_pipe[0]);
  close_fd(&self_pipe[1]);
  char byte;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    char buf[CMSG_SPACE(5 * sizeof(int))];
    struct cmsghdr align;
  } control;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
  ssize_t n;
  do n = recvmsg(CTL_FD, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0) _exit(0); /* the server is gone */
  int fds[5], count = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < k; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (count < 5) fds[count++] = fd;
      else close(fd);
    }
  }
  if (count != 5 || (msg.msg_flags & MSG_CTRUNC)) _exit(1); /* the server sees end of file: a failed start */
  /* Its own session, as a keeper the server spawned itself would have. */
  setsid();
  /* The received descriptors are above 3 (0-3 were taken when they arrived): but one may be
     4. Move them all above 4 first, then into place. */
  for (int i = 0; i < 5; i++) {
    int high = fcntl(fds[i], F_DUPFD_CLOEXEC, START_FD + 1);
    if (high < 0) _exit(1);
    close(fds[i]);
    fds[i] = high;
  }
  for (int i = 0; i < 5; i++)
    if (dup2(fds[i], i) < 0) _exit(1); /* dup2 onto 3 closes the channel */
  for (int i = 0; i < 5; i++) close(fds[i]);
  _exit(keeper_main());
}

static pid_t fork_idle_keeper(int taken_fd) {
  pid_t pid = fork();
  if (pid == 0) idle_keeper(taken_fd);
  return pid;
}

static int zygote_main(int argc, char **argv) {
  title_area = argv[0];
  title_size = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]) + 1;
  signal(SIGPIPE, SIG_IGN);
  close_from(CTL_FD + 1, -1, 0);
#ifdef __linux__
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* inherited by every keeper it forks */
#endif
  int taken[2];
  if (pipe(self_pipe) < 0 || pipe(taken) < 0) return 1;
  for (int i = 0; i < 2; i++) {
    set_cloexec(self_pipe[i]);
    set_nonblock(self_pipe[i]);
    set_cloexec(taken[i]);
  }
  set_nonblock(taken[0]);
  catch_signal(SIGCHLD);
  pid_t idle = -1;
  for (;;) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
      if (pid == idle) idle = -1; /* died idle (killed): fork another */
    if (idle < 0) idle = fork_idle_keeper(taken[1]);
    struct pollfd fds[3] = {
        {.fd = CTL_FD, .events = 0}, /* only its hangup: the idle keeper reads the records */
        {.fd = taken[0], .events = POLLIN},
        {.fd = self_pipe[0], .events = POLLIN},
    };
    /* A failed fork (EAGAIN) is retried after a pause. */
    if (poll(fds, 3, idle < 0 ? 100 : -1) < 0 && errno != EINTR) return 1;
    if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) return 0; /* the server is gone */
    if (fds[1].revents) {
      char buf[64];
      while (read(taken[0], buf, sizeof buf) > 0) {
      }
      idle = -1; /* taken: it is a keeper now; fork the next idle one */
    }
    if (fds[2].revents) drain_self_pipe();
  }
}

#include "kept.c"

int main(int argc, char **argv) {
  struct stat st;
  if (fstat(CTL_FD, &st) < 0 || (argc > 1 && strcmp(argv[1], "--zygote") != 0)) {
    static const char msg[] = "tether-keeper: started by the tether server, which sends the command on fd 3\n";
    write_all(2, msg, sizeof msg - 1);
    return 2;
  }
  if (argc > 1) return zygote_main(argc, argv);
  return keeper_main();
}

/* A keeper: fds 0-4 are set; waits for the command's specification on fd 3 and runs it. */
static int keeper_main(void) {
  signal(SIGPIPE, SIG_IGN);
  /* Nothing beyond our five descriptors is ours to keep, but the zygote's pipe (if it forked us). */
  close_from(START_FD + 1, taken_fd, 0);
  set_cloexec(START_FD);
#ifdef __linux__
  /* Adopt orphaned descendants; and keep same-user processes out of /proc/<keeper>/fd
     (the terminal) and from ptrace. */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
#endif

  /* Waits here until the server sends the command. */
  struct spec spec;
  if (!read_keep() || !read_spec(&spec)) return 1; /* the server went away (or is not a server) */
  set_title(&spec);
  tty_mode = spec.tty;
  devnull_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull_fd < 0) return start_failed(STAGE_SETUP, errno);
  if (pipe(self_pipe) < 0) return start_failed(STAGE_SETUP, errno);
  set_cloexec(self_pipe[0]);
  set_cloexec(self_pipe[1]);
  set_nonblock(self_pipe[0]);
  set_nonblock(self_pipe[1]);
  catch_signal(SIGCHLD);
  catch_signal(SIGTERM);
  catch_signal(SIGINT);
  catch_signal(SIGHUP);

  if (tty_mode) {
    int err = open_terminal(spec.cols, spec.rows);
    if (err) return start_failed(STAGE_PTY, err);
  }
  if (kept) {
    int err = tty_mode ? 0 : open_kept_pipes(spec.stdin_pipe);
    if (err) return start_failed(STAGE_SETUP, err);
    /* Listening before the start is answered: a server that dies from here on can be followed. */
    err = open_listener();
    if (err) return start_failed(STAGE_LISTEN, err);
  }

  /* No handler may run in the child before it resets them. */
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  command_pid = fork();
  if (command_pid == 0) become_command(&spec);
  int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (command_pid < 0) {
    if (kept) unlink(sock_path);
    return start_failed(STAGE_FORK, fork_errno);
  }
  /* From here the child alone tells the server how its start went (see start_message). */
  close(START_FD);
  /* The zygote forks the next idle keeper now, not before: a fork competing for the CPU
     while this one is under way would only slow it down. (A keeper that fails before this
     point exits, which the zygote notices too.) */
  tell_zygote_taken();
  if (kept) return kept_loop();

  /* The command has its own copies now; keep 0-2 occupied with /dev/null. */
  if (tty_mode) {
    tty_in = 0;
    tty_out = 1;
    set_nonblock(tty_in);
    set_nonblock(tty_out);
    dup2(devnull_fd, 2); /* a terminal has no separate stderr: the server's stream ends here */
  } else {
    dup2(devnull_fd, 0);
    dup2(devnull_fd, 1);
    dup2(devnull_fd, 2);
  }
  set_nonblock(CTL_FD);

  for (;;) {
    reap();
    if (stop_requested) {
      kill_tree();
      stop_requested = 0;
    }
    if (command_reaped) command_done();
    maybe_finish_terminal();
    if (exit_sent && !have_children) break;

    struct pollfd fds[5];
    int n = 0;
    int ctl_i = -1, master_i = -1, out_i = -1, in_i = -1;
    fds[n++] = (struct pollfd){.fd = self_pipe[0], .events = POLLIN};
    if (ctl_open) {
      ctl_i = n;
      fds[n++] = (struct pollfd){.fd = CTL_FD, .events = POLLIN};
    }
    if (master_fd >= 0) {
      short ev = 0;
      if (out_len == 0 && !master_eof) ev |= POLLIN;
      if (in_len > 0) ev |= POLLOUT;
      if (ev) {
        master_i = n;
        fds[n++] = (struct pollfd){.fd = master_fd, .events = ev};
      }
    }
    if (tty_out >= 0 && out_len > 0) {
      out_i = n;
      fds[n++] = (struct pollfd){.fd = tty_out, .events = POLLOUT};
    }
    if (tty_in >= 0 && in_len == 0) {
      in_i = n;
      fds[n++] = (struct pollfd){.fd = tty_in, .events = POLLIN};
    }
    int timeout = -1;
    if (tty_mode && command_reaped && !exit_sent && out_len == 0) {
      long long left = DRAIN_QUIET_MS - (now_ms() - last_output_ms);
      timeout = left > 0 ? (int)left : 0;
    }
    int ready = poll(fds, (nfds_t)n, timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) drain_self_pipe();
    if (ctl_i >= 0 && fds[ctl_i].revents && !read_ctl()) {
      /* The server is gone (however it ended): nothing it started may outlive it. */
      ctl_open = 0;
      kill_tree();
      return 0;
    }
    if ((master_i >= 0 && fds[master_i].revents) || (out_i >= 0 && fds[out_i].revents)) relay_output();
    if ((master_i >= 0 && fds[master_i].revents) || (in_i >= 0 && fds[in_i].revents)) relay_input();
  }
  return 0;
}
