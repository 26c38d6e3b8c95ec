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
 *
 * Without prctl (not Linux) the first two are no-ops and isDumpable() answers true.
 */
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define MAX_FDS 8

static napi_value throw_errno(napi_env env, const char *what, int err) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_value message, error, code;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &error);
  napi_create_int32(env, -err, &code);
  napi_set_named_property(env, error, "errno", code);
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
  char byte = 'k';
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = CMSG_SPACE(count * sizeof(int))};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(count * sizeof(int));
  memcpy(CMSG_DATA(c), fds, count * sizeof(int));
#ifdef MSG_NOSIGNAL
  int flags = MSG_NOSIGNAL;
#else
  int flags = 0;
#endif
  ssize_t n;
  do n = sendmsg(fd, &msg, flags);
  while (n < 0 && errno == EINTR);
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

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_property_descriptor props[] = {
      {"setDumpable", NULL, set_dumpable, NULL, NULL, NULL, napi_enumerable, NULL},
      {"isDumpable", NULL, is_dumpable, NULL, NULL, NULL, napi_enumerable, NULL},
      {"socketPair", NULL, socket_pair, NULL, NULL, NULL, napi_enumerable, NULL},
      {"sendFds", NULL, send_fds, NULL, NULL, NULL, napi_enumerable, NULL},
      {"closeFd", NULL, close_fd, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}
