/*
 * tether_native: what the server process itself needs from the OS and Node cannot do.
 *
 *   setDumpable(flag: boolean): void   prctl(PR_SET_DUMPABLE). The server clears it at start,
 *                                       so processes of the same user (every session's
 *                                       children) cannot open /proc/<server>/fd/N, environ or
 *                                       mem, nor ptrace it: the token, the session ids (resume
 *                                       credentials) and other sessions' pipes stay out of reach.
 *   isDumpable(): boolean              prctl(PR_GET_DUMPABLE)
 *   socketPair(seqpacket: boolean): [number, number]
 *                                       socketpair(AF_UNIX), both ends close-on-exec; the
 *                                       first end non-blocking (the server's side)
 *   sendFds(fd: number, fds: number[]): void
 *                                       one one-byte record carrying `fds` (SCM_RIGHTS): how
 *                                       the server hands a pre-forked keeper its sockets
 *   closeFd(fd: number): void
 *   connectReceiveFds(path: string, timeoutMs: number): { socket: number, fds: number[] }
 *                                       connects a Unix stream socket to `path` and receives
 *                                       one byte carrying up to 8 descriptors (SCM_RIGHTS),
 *                                       waiting at most timeoutMs (SO_RCVTIMEO): how a server
 *                                       adopts a kept keeper (and takes over a listening
 *                                       socket). All close-on-exec and non-blocking; the
 *                                       socket stays open for the caller (the keeper's
 *                                       control socket). Throws with errno and code.
 *
 * Without prctl (not Linux) the first two are no-ops and isDumpable() answers true.
 */
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "scm-rights.h"

#define MAX_FDS SCM_FDS_MAX

static const char *errno_code(int err) {
  switch (err) {
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case EAGAIN: return "EAGAIN";
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK: return "EAGAIN";
#endif
    case ETIMEDOUT: return "ETIMEDOUT";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOTSOCK: return "ENOTSOCK";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case EPIPE: return "EPIPE";
    case EPROTO: return "EPROTO";
    case ENOTDIR: return "ENOTDIR";
    default: return NULL;
  }
}

static napi_value throw_errno(napi_env env, const char *what, int err) {
  char msg[160];
  const char *name = errno_code(err);
  if (name) snprintf(msg, sizeof msg, "%s %s: %s", what, name, strerror(err));
  else snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_value message, error, code;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &error);
  napi_create_int32(env, -err, &code);
  napi_set_named_property(env, error, "errno", code);
  if (name) {
    napi_value text;
    napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &text);
    napi_set_named_property(env, error, "code", text);
  }
  napi_value syscall;
  napi_create_string_utf8(env, what, NAPI_AUTO_LENGTH, &syscall);
  napi_set_named_property(env, error, "syscall", syscall);
  napi_throw(env, error);
  return NULL;
}

static napi_value type_error(napi_env env, const char *usage) {
  napi_throw_type_error(env, NULL, usage);
  return NULL;
}

static napi_value set_dumpable(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool flag = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_bool(env, argv[0], &flag) != napi_ok)
    return type_error(env, "setDumpable(flag: boolean)");
#ifdef __linux__
  if (prctl(PR_SET_DUMPABLE, flag ? 1 : 0, 0, 0, 0) != 0) return throw_errno(env, "prctl(PR_SET_DUMPABLE)", errno);
#endif
  return NULL;
}

static napi_value is_dumpable(napi_env env, napi_callback_info info) {
  (void)info;
  bool dumpable = true;
#ifdef __linux__
  int r = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  if (r < 0) return throw_errno(env, "prctl(PR_GET_DUMPABLE)", errno);
  dumpable = r != 0;
#endif
  napi_value result;
  napi_get_boolean(env, dumpable, &result);
  return result;
}

static int set_flag(int fd, int get, int set, int flag) {
  int flags = fcntl(fd, get);
  return flags < 0 ? -1 : fcntl(fd, set, flags | flag);
}

static napi_value socket_pair(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool seqpacket = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_bool(env, argv[0], &seqpacket) != napi_ok)
    return type_error(env, "socketPair(seqpacket: boolean)");
  int fds[2];
  int type = seqpacket ? SOCK_SEQPACKET : SOCK_STREAM;
#ifdef SOCK_CLOEXEC
  if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, fds) != 0) return throw_errno(env, "socketpair", errno);
#else
  if (socketpair(AF_UNIX, type, 0, fds) != 0) return throw_errno(env, "socketpair", errno);
  set_flag(fds[0], F_GETFD, F_SETFD, FD_CLOEXEC);
  set_flag(fds[1], F_GETFD, F_SETFD, FD_CLOEXEC);
#endif
  if (set_flag(fds[0], F_GETFL, F_SETFL, O_NONBLOCK) != 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    return throw_errno(env, "fcntl(O_NONBLOCK)", err);
  }
  napi_value result, a, b;
  napi_create_array_with_length(env, 2, &result);
  napi_create_int32(env, fds[0], &a);
  napi_create_int32(env, fds[1], &b);
  napi_set_element(env, result, 0, a);
  napi_set_element(env, result, 1, b);
  return result;
}

static napi_value send_fds(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t fd;
  uint32_t count = 0;
  bool is_array = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_is_array(env, argv[1], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, argv[1], &count) != napi_ok || count == 0 || count > MAX_FDS)
    return type_error(env, "sendFds(fd: number, fds: number[] (1-8))");
  int fds[MAX_FDS];
  for (uint32_t i = 0; i < count; i++) {
    napi_value v;
    if (napi_get_element(env, argv[1], i, &v) != napi_ok || napi_get_value_int32(env, v, &fds[i]) != napi_ok)
      return type_error(env, "sendFds(fd: number, fds: number[] (1-8))");
  }
#ifdef MSG_NOSIGNAL
  int flags = MSG_NOSIGNAL;
#else
  int flags = 0;
#endif
  ssize_t n = send_fds_byte(fd, 'k', fds, (int)count, flags);
  if (n < 0) return throw_errno(env, "sendmsg", errno);
  return NULL;
}

static napi_value close_fd(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok)
    return type_error(env, "closeFd(fd: number)");
  if (close(fd) != 0 && errno != EINTR) return throw_errno(env, "close", errno);
  return NULL;
}

static napi_value connect_receive_fds(napi_env env, napi_callback_info info) {
  static const char usage[] = "connectReceiveFds(path: string, timeoutMs: number)";
  size_t argc = 2;
  napi_value argv[2];
  char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
  size_t path_len = 0;
  double timeout_ms = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_string_utf8(env, argv[0], path, sizeof path, &path_len) != napi_ok ||
      napi_get_value_double(env, argv[1], &timeout_ms) != napi_ok || !(timeout_ms >= 0))
    return type_error(env, usage);
  struct sockaddr_un addr;
  if (path_len == 0 || strlen(path) != path_len) return type_error(env, usage);
  if (path_len >= sizeof addr.sun_path) return throw_errno(env, "connect", ENAMETOOLONG);
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path, path_len);
#ifdef SOCK_CLOEXEC
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
#else
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd >= 0) set_flag(fd, F_GETFD, F_SETFD, FD_CLOEXEC);
#endif
  if (fd < 0) return throw_errno(env, "socket", errno);
  int r;
  do r = connect(fd, (struct sockaddr *)&addr, sizeof addr);
  while (r < 0 && errno == EINTR);
  if (r < 0) {
    int err = errno;
    close(fd);
    return throw_errno(env, "connect", err);
  }
  struct timeval tv = {.tv_sec = (time_t)(timeout_ms / 1000), .tv_usec = (suseconds_t)((long long)timeout_ms % 1000 * 1000)};
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000; /* 0 would mean forever */
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
    int err = errno;
    close(fd);
    return throw_errno(env, "setsockopt(SO_RCVTIMEO)", err);
  }
  char byte;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
#ifdef MSG_CMSG_CLOEXEC
  int flags = MSG_CMSG_CLOEXEC;
#else
  int flags = 0;
#endif
  ssize_t n;
  do n = recvmsg(fd, &msg, flags);
  while (n < 0 && errno == EINTR);
  int err = n < 0 ? errno : 0;
  int fds[MAX_FDS];
  int count = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); n > 0 && c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < k; i++) {
      int got;
      memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      if (count < MAX_FDS) fds[count++] = got;
      else close(got);
    }
  }
  if (n <= 0 || (msg.msg_flags & MSG_CTRUNC)) {
    for (int i = 0; i < count; i++) close(fds[i]);
    close(fd);
    /* End of file: the listener closed the connection without a word (refused). */
    return throw_errno(env, "recvmsg", n == 0 || err == 0 ? ECONNRESET : err);
  }
  struct timeval none = {0, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  set_flag(fd, F_GETFL, F_SETFL, O_NONBLOCK);
  napi_value result, socket_value, list;
  napi_create_object(env, &result);
  napi_create_int32(env, fd, &socket_value);
  napi_create_array_with_length(env, (size_t)count, &list);
  for (int i = 0; i < count; i++) {
#ifndef MSG_CMSG_CLOEXEC
    set_flag(fds[i], F_GETFD, F_SETFD, FD_CLOEXEC);
#endif
    set_flag(fds[i], F_GETFL, F_SETFL, O_NONBLOCK);
    napi_value v;
    napi_create_int32(env, fds[i], &v);
    napi_set_element(env, list, (uint32_t)i, v);
  }
  napi_set_named_property(env, result, "socket", socket_value);
  napi_set_named_property(env, result, "fds", list);
  return result;
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_property_descriptor props[] = {
      {"setDumpable", NULL, set_dumpable, NULL, NULL, NULL, napi_enumerable, NULL},
      {"isDumpable", NULL, is_dumpable, NULL, NULL, NULL, napi_enumerable, NULL},
      {"socketPair", NULL, socket_pair, NULL, NULL, NULL, napi_enumerable, NULL},
      {"sendFds", NULL, send_fds, NULL, NULL, NULL, napi_enumerable, NULL},
      {"closeFd", NULL, close_fd, NULL, NULL, NULL, napi_enumerable, NULL},
      {"connectReceiveFds", NULL, connect_receive_fds, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}
