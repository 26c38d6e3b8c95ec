/*
 * Kept mode of tether-keeper (issue #27): the keeper outlives its server and is adopted by
 * the next one. Included by keeper.c (one translation unit: the keeper stays one plain
 * `gcc -static` command, and this part shares keeper.c's state without exporting it).
 * The protocol is documented in keeper.c's header comment.
 *
 * In kept mode the command's stdout and stderr are pipes (with a terminal: the master) the
 * keeper reads into one retained buffer per stream, forwarded raw on fds 1 and 2; stdin comes
 * framed on fd 0 and is written to the command only once a frame is whole. When the control
 * socket reaches end of file the keeper keeps everything running for ADOPT_MS, listening on
 * its Unix socket for a successor, which receives fresh channels and a dump of the state.
 */

/* Longest writeId kept; ids remembered; largest stdin frame; at most this many marks kept. */
enum { MAX_ID_BYTES = 1024, ID_RING = 4096, MAX_FRAME_BYTES = 64 * 1024 * 1024, MAX_MARKS = 1 << 20 };
/* A successor that does not read its dump for this long is dropped (the adopt timer restarts). */
enum { DUMP_SEND_TIMEOUT_S = 10 };
/* Reads (of at most 4 KiB) of a hung-up control socket's last lines at an accept: far more than any socket buffer holds. */
enum { CTL_DRAIN_READS = 1 << 16 };

static int released = 0; /* "release" (or kill, or a signal): behave as without keep */
static unsigned long long adopt_ms = 0, cap_bytes = 0;
static char *sock_path = NULL;
static char *meta = NULL;
static size_t meta_len = 0;
static int listen_fd = -1;
static long long adopt_deadline = -1; /* while no server is attached */
static int kept_child_fds[3] = {-1, -1, -1}; /* the command's ends of its stdio pipes */

/* One output stream: bytes [base, base + len) retained at buf + head; [base, fwd) forwarded. */
struct kstream {
  int src; /* the command's side (pipe read end, or the master), -1 once at end of file */
  int dst; /* the server's channel (fd 1 or 2), -1 while none */
  char *buf;
  size_t head, len, size;
  unsigned long long base, fwd;
};
static struct kstream kst[3] = {{-1, -1, NULL, 0, 0, 0, 0, 0}, {-1, -1, NULL, 0, 0, 0, 0, 0}, {-1, -1, NULL, 0, 0, 0, 0, 0}};

/* Stdin: raw bytes read from fd 0, the frame being received, the frame being written. */
static int srv_in = -1;
static int cmd_in = -1; /* the command's stdin pipe (write end) or the master */
static char raw_in[RELAY_BYTES];
static size_t raw_len = 0, raw_off = 0;
enum { FR_HEADER, FR_ID, FR_DATA };
static int fr_state = FR_HEADER;
static char fr_hdr[64];
static size_t fr_hdr_len = 0;
static char fr_id[MAX_ID_BYTES];
static size_t fr_id_len = 0, fr_id_need = 0;
static char *fr_data = NULL;
static size_t fr_data_len = 0, fr_data_need = 0;
static char *pend = NULL;
static size_t pend_len = 0, pend_off = 0;
static unsigned long long taken = 0, took_sent = 0;
static int eof_taken = 0;
static char *ids[ID_RING];
static size_t id_lens[ID_RING];
static size_t id_first = 0, id_count = 0;

struct kmark {
  unsigned long long seq, end;
  char stream; /* '1', '2', 'x', 'c' */
};
static struct kmark *marks = NULL;
static size_t mark_count = 0, mark_size = 0;
/* The highest seq the server dropped: a successor numbers on from it even when no mark is left. */
static unsigned long long dropped_seq = 0;

static unsigned long long retained_total(void) { return (unsigned long long)kst[1].len + kst[2].len; }

/* ---- the keep message ------------------------------------------------------------------ */

/* Reads `len` bytes of the control socket (buffered bytes first) into dst; 0 on end of file. */
static int ctl_take(char *dst, size_t len) {
  size_t have = ctl_len < len ? ctl_len : len;
  memcpy(dst, ctl_buf, have);
  memmove(ctl_buf, ctl_buf + have, ctl_len - have);
  ctl_len -= have;
  while (have < len) {
    ssize_t n = read_wait(CTL_FD, dst + have, len - have);
    if (n <= 0) return 0;
    have += (size_t)n;
  }
  return 1;
}

/*
 * Before the spec: "keep <ADOPT_MS> <CAP_BYTES> <PATHLEN> <METALEN>\n<PATH><META>". Returns 1
 * (kept mode or not: the next message is then the spec), 0 if the server went away or sent nonsense.
 */
static int read_keep(void) {
  char *nl;
  while ((nl = memchr(ctl_buf, '\n', ctl_len)) == NULL) {
    if (ctl_len == sizeof ctl_buf) return 0;
    ssize_t n = read_wait(CTL_FD, ctl_buf + ctl_len, sizeof ctl_buf - ctl_len);
    if (n <= 0) return 0;
    ctl_len += (size_t)n;
  }
  if (ctl_len < 5 || memcmp(ctl_buf, "keep ", 5) != 0) return 1;
  *nl = '\0';
  unsigned long long a, c, plen, mlen;
  if (sscanf(ctl_buf, "keep %llu %llu %llu %llu", &a, &c, &plen, &mlen) != 4 || plen == 0 ||
      plen >= sizeof(((struct sockaddr_un *)0)->sun_path) || mlen > MAX_SPEC_BYTES || c == 0)
    return 0;
  size_t header = (size_t)(nl - ctl_buf) + 1;
  memmove(ctl_buf, ctl_buf + header, ctl_len - header);
  ctl_len -= header;
  sock_path = calloc(1, (size_t)plen + 1);
  meta = malloc((size_t)mlen + 1);
  if (!sock_path || !meta || !ctl_take(sock_path, (size_t)plen) || !ctl_take(meta, (size_t)mlen)) return 0;
  if (memchr(sock_path, '\0', (size_t)plen)) return 0;
  meta_len = (size_t)mlen;
  adopt_ms = a;
  cap_bytes = c;
  kept = 1;
  return 1;
}

/* Binds and listens on the socket path (mode 0600); returns 0 or an errno. */
static int open_listener(void) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, sock_path, strlen(sock_path));
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return errno;
  set_cloexec(fd);
  mode_t old = umask(0177); /* never a moment with a wider mode; the command inherits the old one */
  int r = bind(fd, (struct sockaddr *)&addr, sizeof addr);
  int err = errno;
  umask(old);
  if (r == 0 && chmod(sock_path, 0600) < 0) {
    err = errno;
    r = -1;
    unlink(sock_path);
  }
  if (r == 0 && listen(fd, 4) < 0) {
    err = errno;
    r = -1;
    unlink(sock_path);
  }
  if (r < 0) {
    close(fd);
    return err;
  }
  set_nonblock(fd);
  listen_fd = fd;
  return 0;
}

/* The command's stdio pipes (without a terminal); returns 0 or an errno. */
static int open_kept_pipes(int stdin_pipe) {
  int p[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
  for (int i = 0; i < 3; i++) {
    if (i == 0 && !stdin_pipe) continue;
    if (pipe(p[i]) < 0) {
      int err = errno;
      for (int j = 0; j < i; j++) {
        close_fd(&p[j][0]);
        close_fd(&p[j][1]);
      }
      return err;
    }
    set_cloexec(p[i][0]);
    set_cloexec(p[i][1]);
  }
  kept_child_fds[0] = p[0][0];
  cmd_in = p[0][1];
  kept_child_fds[1] = p[1][1];
  kst[1].src = p[1][0];
  kept_child_fds[2] = p[2][1];
  kst[2].src = p[2][0];
  return 0;
}

/* In the forked child, without a terminal: the pipes become its fds 0-2. */
static void kept_child_stdio(void) {
  if (dup2(kept_child_fds[0] >= 0 ? kept_child_fds[0] : devnull_fd, 0) < 0 || dup2(kept_child_fds[1], 1) < 0 ||
      dup2(kept_child_fds[2], 2) < 0)
    fail_in_child(STAGE_SETUP);
}

/* ---- output -------------------------------------------------------------------------- */

static int stream_done(int s) { return kst[s].src < 0 && kst[s].fwd == kst[s].base + kst[s].len; }

static int stream_readable(int s) {
  const struct kstream *k = &kst[s];
  return k->src >= 0 && (k->dst < 0 || k->fwd == k->base + k->len) && retained_total() < cap_bytes;
}

static void end_source(int s) {
  if (kst[s].src == master_fd) {
    kst[s].src = -1; /* the terminal finishes apart (kept_finish_terminal) */
    master_eof = 1;
    return;
  }
  close_fd(&kst[s].src);
}

/* Reads what the command wrote on stream s, up to the cap. */
static void kept_read(int s) {
  struct kstream *k = &kst[s];
  size_t room = (size_t)(cap_bytes - retained_total());
  if (room > RELAY_BYTES) room = RELAY_BYTES;
  if (k->head + k->len + room > k->size) {
    if (k->head > 0) {
      memmove(k->buf, k->buf + k->head, k->len);
      k->head = 0;
    }
    if (k->len + room > k->size) {
      size_t want = k->size ? k->size * 2 : RELAY_BYTES;
      while (want < k->len + room) want *= 2;
      char *grown = realloc(k->buf, want);
      if (!grown) return; /* try again later */
      k->buf = grown;
      k->size = want;
    }
  }
  ssize_t n = read(k->src, k->buf + k->head + k->len, room);
  if (n > 0) {
    k->len += (size_t)n;
    if (s == 1 && tty_mode) last_output_ms = now_ms();
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    end_source(s); /* a terminal: EIO once every slave descriptor is closed */
  }
}

/* Ends the server's channel of stream s (the number stays taken, by /dev/null). */
static void end_dst(int s) {
  if (kst[s].dst < 0) return;
  dup2(devnull_fd, s);
  kst[s].dst = -1;
}

static void kept_forward(int s) {
  struct kstream *k = &kst[s];
  unsigned long long end = k->base + k->len;
  if (k->dst < 0 || k->fwd >= end) return;
  ssize_t n = write(k->dst, k->buf + k->head + (size_t)(k->fwd - k->base), (size_t)(end - k->fwd));
  if (n > 0) k->fwd += (unsigned long long)n;
  else if (n < 0 && errno != EAGAIN && errno != EINTR) end_dst(s); /* the server closed its end: retain only */
}

/* Frees stream s's bytes below offset `upto` (never bytes not yet forwarded). */
static void free_below(int s, unsigned long long upto) {
  struct kstream *k = &kst[s];
  if (upto > k->fwd) upto = k->fwd;
  if (upto <= k->base) return;
  size_t n = (size_t)(upto - k->base);
  k->head += n;
  k->len -= n;
  k->base = upto;
  if (k->len == 0) k->head = 0;
}

/* ---- stdin frames -------------------------------------------------------------------- */

static void remember_id(const char *id, size_t len) {
  char *copy = malloc(len ? len : 1);
  if (!copy) return;
  memcpy(copy, id, len);
  size_t slot = (id_first + id_count) % ID_RING;
  if (id_count == ID_RING) {
    free(ids[id_first]);
    id_first = (id_first + 1) % ID_RING;
  } else {
    id_count++;
  }
  ids[slot] = copy;
  id_lens[slot] = len;
}

static void close_cmd_in(void) {
  if (cmd_in >= 0 && cmd_in != master_fd) close(cmd_in);
  cmd_in = -1;
}

/* Forgets a frame not entirely received (it is never applied in part) and unparsed input. */
static void drop_partial_frame(void) {
  fr_state = FR_HEADER;
  fr_hdr_len = fr_id_len = fr_id_need = fr_data_len = fr_data_need = 0;
  free(fr_data);
  fr_data = NULL;
  raw_len = raw_off = 0;
}

static void end_srv_in(void) {
  if (srv_in < 0) return;
  dup2(devnull_fd, 0);
  srv_in = -1;
  drop_partial_frame();
}

/* A whole frame arrived: taken (counted, its id remembered), its data to be written. */
static void frame_taken(void) {
  taken++;
  if (fr_id_len > 0) remember_id(fr_id, fr_id_len);
  if (cmd_in >= 0 && fr_data_len > 0) {
    pend = fr_data;
    pend_len = fr_data_len;
    pend_off = 0;
  } else {
    free(fr_data);
  }
  fr_data = NULL;
  fr_state = FR_HEADER;
  fr_hdr_len = fr_id_len = fr_data_len = 0;
}

/* Parses raw input until a frame is taken with data to write, or the input runs out. */
static void parse_frames(void) {
  while (pend == NULL && raw_off < raw_len && srv_in >= 0) {
    char *at = raw_in + raw_off;
    size_t avail = raw_len - raw_off;
    if (fr_state == FR_HEADER) {
      char *nl = memchr(at, '\n', avail);
      size_t take = nl ? (size_t)(nl - at) : avail;
      if (fr_hdr_len + take >= sizeof fr_hdr) {
        end_srv_in(); /* not a frame header: the server's stdin channel is unusable */
        return;
      }
      memcpy(fr_hdr + fr_hdr_len, at, take);
      fr_hdr_len += take;
      raw_off += take + (nl ? 1 : 0);
      if (!nl) continue;
      fr_hdr[fr_hdr_len] = '\0';
      unsigned long long len, idlen;
      char extra;
      if (strcmp(fr_hdr, "eof") == 0) {
        taken++;
        eof_taken = 1;
        fr_hdr_len = 0;
        if (!tty_mode) close_cmd_in(); /* a terminal has no end of file to pass on */
        continue;
      }
      if (sscanf(fr_hdr, "w %llu %llu%c", &len, &idlen, &extra) != 2 || len > MAX_FRAME_BYTES || idlen > MAX_ID_BYTES) {
        end_srv_in();
        return;
      }
      fr_id_need = (size_t)idlen;
      fr_data_need = (size_t)len;
      fr_data = len > 0 ? malloc((size_t)len) : NULL;
      if (len > 0 && !fr_data) {
        end_srv_in();
        return;
      }
      fr_state = FR_ID;
      if (fr_id_need == 0 && fr_data_need == 0) frame_taken();
      else if (fr_id_need == 0) fr_state = FR_DATA;
    } else if (fr_state == FR_ID) {
      size_t take = fr_id_need - fr_id_len < avail ? fr_id_need - fr_id_len : avail;
      memcpy(fr_id + fr_id_len, at, take);
      fr_id_len += take;
      raw_off += take;
      if (fr_id_len == fr_id_need) {
        if (fr_data_need == 0) frame_taken();
        else fr_state = FR_DATA;
      }
    } else {
      size_t take = fr_data_need - fr_data_len < avail ? fr_data_need - fr_data_len : avail;
      memcpy(fr_data + fr_data_len, at, take);
      fr_data_len += take;
      raw_off += take;
      if (fr_data_len == fr_data_need) frame_taken();
    }
  }
  if (raw_off == raw_len) raw_len = raw_off = 0;
}

static void read_frames(void) {
  ssize_t n = read(srv_in, raw_in, sizeof raw_in);
  if (n > 0) {
    raw_len = (size_t)n;
    raw_off = 0;
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    end_srv_in(); /* a frame cut short is dropped whole */
  }
}

/* Writes the taken frame's data to the command; discards it if the command's stdin is gone. */
static void write_pending(void) {
  if (!pend) return;
  if (cmd_in >= 0) {
    ssize_t n = write(cmd_in, pend + pend_off, pend_len - pend_off);
    if (n > 0) {
      pend_off += (size_t)n;
      if (pend_off < pend_len) return;
    } else if (n == 0 || errno == EAGAIN || errno == EINTR) {
      return;
    } else if (cmd_in != master_fd) {
      close_cmd_in(); /* EPIPE: the command closed its stdin */
    }
  }
  free(pend);
  pend = NULL;
  pend_len = pend_off = 0;
}

/*
 * Takes frames and writes their data to the command until the input read so far is used up or
 * the command's pipe is full (POLLOUT then). Input stays unparsed only while a frame waits to
 * be written: the loop polls fd 0 only once it is all used, so stopping with input left and
 * nothing to write would wait for an event that may never come (an eof read together with the
 * frame before it, that frame written at once: the command would never see its end of file).
 */
static void pump_stdin(void) {
  for (;;) {
    if (pend) write_pending(); /* discarded at once if the command's stdin is gone */
    if (pend) return;
    parse_frames();
    if (!pend) return;
  }
}

/* ---- control lines (kept mode) ------------------------------------------------------- */

/* mark / drop / release; returns 1 if the line was one of them. */
static int kept_handle_line(const char *line) {
  if (!kept) return 0;
  if (strcmp(line, "release") == 0) {
    released = 1;
    return 1;
  }
  unsigned long long seq, end;
  char kind[4], extra;
  if (sscanf(line, "mark %llu %3s %llu%c", &seq, kind, &end, &extra) >= 2) {
    struct kmark m = {seq, 0, 0};
    if (strcmp(kind, "x") == 0 || strcmp(kind, "c") == 0) m.stream = kind[0];
    else if ((strcmp(kind, "1") == 0 || strcmp(kind, "2") == 0) && sscanf(line, "mark %llu %3s %llu%c", &seq, kind, &end, &extra) == 3) {
      m.stream = kind[0];
      m.end = end;
    } else {
      return 1;
    }
    if (mark_count == mark_size) {
      if (mark_size >= MAX_MARKS) return 1;
      size_t want = mark_size ? mark_size * 2 : 64;
      struct kmark *grown = realloc(marks, want * sizeof *marks);
      if (!grown) return 1;
      marks = grown;
      mark_size = want;
    }
    marks[mark_count++] = m;
    return 1;
  }
  if (sscanf(line, "drop %llu%c", &seq, &extra) == 1) {
    if (seq > dropped_seq) dropped_seq = seq;
    for (int s = 1; s <= 2; s++) {
      for (size_t i = mark_count; i-- > 0;) {
        if (marks[i].seq <= seq && marks[i].stream == '0' + s) {
          free_below(s, marks[i].end);
          break;
        }
      }
    }
    size_t kept_from = 0;
    while (kept_from < mark_count && marks[kept_from].seq <= seq) kept_from++;
    memmove(marks, marks + kept_from, (mark_count - kept_from) * sizeof *marks);
    mark_count -= kept_from;
    return 1;
  }
  return 0;
}

/* ---- detaching and adoption ---------------------------------------------------------- */

/* The server is gone: release its channels, keep the command running, start the adopt timer. */
static void kept_detach(void) {
  ctl_open = 0;
  ctl_len = 0;
  dup2(devnull_fd, CTL_FD);
  end_srv_in();
  end_dst(1);
  end_dst(2);
  adopt_deadline = now_ms() + (long long)adopt_ms;
}

static int peer_is_us(int fd) {
#ifdef SO_PEERCRED
  struct ucred cred;
  socklen_t len = sizeof cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid();
#else
  uid_t uid;
  gid_t gid;
  return getpeereid(fd, &uid, &gid) == 0 && uid == geteuid();
#endif
}

static int send_fds(int fd, const int *fds, int count) {
  return send_fds_byte(fd, 1, fds, count, 0) == 1 ? 0 : -1;
}

static int dump_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int dump_line(const char *fmt, ...) {
  char line[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  return n > 0 && (size_t)n < sizeof line ? write_all(CTL_FD, line, (size_t)n) : -1;
}

/* The dump (see keeper.c's header), on the new control socket; -1 if it could not be sent. */
static int write_dump(void) {
  reap();
  if (dump_line("adopted 1\npid %d %d\nmeta %zu\n", (int)command_pid, (int)getpid(), meta_len) < 0 ||
      write_all(CTL_FD, meta, meta_len) < 0)
    return -1;
  for (int s = 1; s <= 2; s++) {
    if (dump_line("stream %d %llu %zu\n", s, kst[s].base, kst[s].len) < 0 || write_all(CTL_FD, kst[s].buf + kst[s].head, kst[s].len) < 0)
      return -1;
  }
  for (size_t i = 0; i < mark_count; i++) {
    int r = marks[i].stream == 'x' || marks[i].stream == 'c' ? dump_line("mark %llu %c\n", marks[i].seq, marks[i].stream)
                                                             : dump_line("mark %llu %c %llu\n", marks[i].seq, marks[i].stream, marks[i].end);
    if (r < 0) return -1;
  }
  if (command_reaped) {
    int r = WIFSIGNALED(command_status) ? dump_line("exited -1 %d\n", WTERMSIG(command_status))
                                        : dump_line("exited %d 0\n", WIFEXITED(command_status) ? WEXITSTATUS(command_status) : -1);
    if (r < 0) return -1;
  }
  if (dump_line("dropped %llu\ngone %d\nstdin %llu %d\n", dropped_seq, have_children ? 0 : 1, taken, eof_taken) < 0) return -1;
  for (size_t i = 0; i < id_count; i++) {
    size_t slot = (id_first + i) % ID_RING;
    if (dump_line("id %zu\n", id_lens[slot]) < 0 || write_all(CTL_FD, ids[slot], id_lens[slot]) < 0) return -1;
  }
  return dump_line("end\n");
}

/*
 * Whether the attached server is gone though its end of file was not read yet. When the keeper
 * was not scheduled across that server's last lines, its death and a successor's connect, one
 * poll reports them all, and one read takes the lines but not the end of file behind them:
 * the successor's connection would be refused as if a second live server asked. The socket
 * says it (POLLHUP: the peer closed, nothing more can come), so the lines left are read and
 * handled here — a successor's dump includes what its predecessor said last — up to the end
 * of file. A server still attached (a second live server connecting) is no hang-up.
 */
static int ctl_hung_up(void) {
  struct pollfd p = {.fd = CTL_FD, .events = POLLIN};
  if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLHUP | POLLERR))) return 0;
  /* What the dead peer left queued is finite (its receive buffer at most): read_ctl returns 0 at
     its end (end of file, or the reset of a peer that closed with our lines unread). The bound
     only guards against a loop should a read of a hung-up socket ever say EAGAIN. */
  for (int i = 0; i < CTL_DRAIN_READS; i++)
    if (!read_ctl()) return 1;
  return 0;
}

/*
 * A connection on the listening socket. Taken only while no server is attached and only from
 * our own uid (anything else is closed at once): it receives three new channels (stdin,
 * stdout, stderr: one byte 0x01 with their fds), then the dump, and becomes the control socket.
 * A server whose hang-up is pending is detached first (ctl_hung_up): its successor is taken.
 */
static void kept_accept(void) {
  int c = accept(listen_fd, NULL, NULL);
  if (c < 0) return;
  set_cloexec(c);
  if (released || !peer_is_us(c)) {
    close(c);
    return;
  }
  if (ctl_open && ctl_hung_up()) kept_detach();
  /* Still attached, or the last lines said release or kill (the loop's top acts on them). */
  if (ctl_open || released || stop_requested) {
    close(c);
    return;
  }
  int pairs[3][2];
  int made = 0;
  for (; made < 3; made++) {
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pairs[made]) < 0) break;
    set_cloexec(pairs[made][0]);
    set_cloexec(pairs[made][1]);
  }
  int theirs[3] = {made > 0 ? pairs[0][0] : -1, made > 1 ? pairs[1][0] : -1, made > 2 ? pairs[2][0] : -1};
  if (made < 3 || send_fds(c, theirs, 3) < 0) {
    for (int i = 0; i < made; i++) {
      close(pairs[i][0]);
      close(pairs[i][1]);
    }
    close(c);
    return;
  }
  for (int i = 0; i < 3; i++) {
    close(pairs[i][0]);
    dup2(pairs[i][1], i);
    close(pairs[i][1]);
  }
  dup2(c, CTL_FD);
  close(c);
  struct timeval tv = {.tv_sec = DUMP_SEND_TIMEOUT_S, .tv_usec = 0};
  setsockopt(CTL_FD, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ctl_open = 1;
  ctl_len = 0;
  adopt_deadline = -1;
  srv_in = 0;
  drop_partial_frame();
  for (int s = 1; s <= 2; s++) {
    kst[s].dst = s;
    kst[s].fwd = kst[s].base + kst[s].len; /* in the dump */
  }
  int flags = fcntl(CTL_FD, F_GETFL);
  if (flags >= 0) fcntl(CTL_FD, F_SETFL, flags & ~O_NONBLOCK);
  if (write_dump() < 0) {
    kept_detach(); /* a successor that died mid-dump: the adopt timer starts again */
    return;
  }
  took_sent = taken;
  for (int fd = 0; fd <= CTL_FD; fd++) set_nonblock(fd);
  for (int s = 1; s <= 2; s++)
    if (stream_done(s)) end_dst(s);
}

/* ---- the kept-mode main loop --------------------------------------------------------- */

static void kept_command_done(void) {
  static int done = 0;
  if (done) return;
  done = 1;
  if (!tty_mode) {
    send_exit();
    return;
  }
  close_fd(&held_slave_fd);
  last_output_ms = now_ms();
}

/* With a terminal: once drained after the command's end (and forwarded), close it and report. */
static void kept_finish_terminal(void) {
  if (!tty_mode || !command_reaped || exit_sent) return;
  int quiet = stream_readable(1) && now_ms() - last_output_ms >= DRAIN_QUIET_MS;
  if (!master_eof && !quiet) return;
  if (kst[1].dst >= 0 && kst[1].fwd < kst[1].base + kst[1].len) return;
  kst[1].src = -1;
  if (cmd_in == master_fd) cmd_in = -1;
  close_fd(&master_fd);
  send_exit();
}

static int kept_loop(void) {
  srv_in = 0;
  kst[1].dst = 1;
  if (tty_mode) {
    kst[1].src = master_fd;
    cmd_in = master_fd;
    dup2(devnull_fd, 2); /* a terminal has no separate stderr: the server's stream ends here */
  } else {
    kst[2].dst = 2;
    for (int i = 0; i < 3; i++) close_fd(&kept_child_fds[i]);
    for (int s = 1; s <= 2; s++) set_nonblock(kst[s].src);
    if (cmd_in >= 0) set_nonblock(cmd_in);
  }
  for (int fd = 0; fd <= CTL_FD; fd++) set_nonblock(fd);

  for (;;) {
    reap();
    if (stop_requested) {
      released = 1; /* a kill (message or signal) is for good */
      kill_tree();
      stop_requested = 0;
    }
    if (command_reaped) kept_command_done();
    kept_finish_terminal();
    for (int s = 1; s <= 2; s++)
      if (stream_done(s)) end_dst(s);
    if (!ctl_open && (released || now_ms() >= adopt_deadline)) {
      kill_tree(); /* nobody adopted it in time (or it was released): nothing may outlive it */
      break;
    }
    if (released && exit_sent && !have_children && stream_done(1) && stream_done(2)) break;
    if (tty_mode && !stream_readable(1) && kst[1].src >= 0) last_output_ms = now_ms(); /* quiet counts only while reading */

    struct pollfd fds[10];
    int n = 0;
    int ctl_i = -1, listen_i = -1, in_i = -1, src_i[3] = {-1, -1, -1}, dst_i[3] = {-1, -1, -1};
    fds[n++] = (struct pollfd){.fd = self_pipe[0], .events = POLLIN};
    if (ctl_open) {
      ctl_i = n;
      fds[n++] = (struct pollfd){.fd = CTL_FD, .events = POLLIN};
    }
    listen_i = n;
    fds[n++] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
    for (int s = 1; s <= 2; s++) {
      if (stream_readable(s)) {
        src_i[s] = n;
        fds[n++] = (struct pollfd){.fd = kst[s].src, .events = POLLIN};
      }
      if (kst[s].dst >= 0 && kst[s].fwd < kst[s].base + kst[s].len) {
        dst_i[s] = n;
        fds[n++] = (struct pollfd){.fd = kst[s].dst, .events = POLLOUT};
      }
    }
    if (srv_in >= 0 && !pend && raw_len == 0) {
      in_i = n;
      fds[n++] = (struct pollfd){.fd = srv_in, .events = POLLIN};
    }
    if (pend && cmd_in >= 0) {
      /* Room in the command's pipe: pump_stdin below writes on. */
      fds[n++] = (struct pollfd){.fd = cmd_in, .events = POLLOUT};
    }
    long long timeout = -1;
    if (!ctl_open) {
      long long left = adopt_deadline - now_ms();
      timeout = left > 0 ? left : 0;
    }
    if (tty_mode && command_reaped && !exit_sent && stream_readable(1)) {
      long long left = DRAIN_QUIET_MS - (now_ms() - last_output_ms);
      if (left < 0) left = 0;
      if (timeout < 0 || left < timeout) timeout = left;
    }
    int ready = poll(fds, (nfds_t)n, timeout > INT_MAX ? INT_MAX : (int)timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) drain_self_pipe();
    if (ctl_i >= 0 && fds[ctl_i].revents && !read_ctl()) {
      kept_detach();
      continue; /* released: killed and gone at the top of the loop */
    }
    if (fds[listen_i].revents) kept_accept();
    for (int s = 1; s <= 2; s++) {
      if (src_i[s] >= 0 && fds[src_i[s]].revents && kst[s].src >= 0) kept_read(s);
      if (kst[s].dst >= 0 && (dst_i[s] < 0 || fds[dst_i[s]].revents)) kept_forward(s);
    }
    if (in_i >= 0 && fds[in_i].revents) read_frames();
    pump_stdin();
    if (ctl_open && taken != took_sent) {
      send_ctl("took %llu\n", taken);
      took_sent = taken;
    }
  }
  if (sock_path) unlink(sock_path);
  return 0;
}
