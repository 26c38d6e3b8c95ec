/*
 * One byte carrying descriptors over a Unix stream socket (SCM_RIGHTS), the one copy of it:
 * addon.c's `sendFds` (the server handing its listening socket to a successor) and kept.c (a
 * kept keeper handing its channels to the server that adopts it) both use it.
 */
#ifndef TETHER_SCM_RIGHTS_H
#define TETHER_SCM_RIGHTS_H

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* The most descriptors one message carries. */
#define SCM_FDS_MAX 8

/*
 * Sends `byte` with `count` (1 to SCM_FDS_MAX) descriptors on `fd`, with sendmsg `flags`,
 * retried on EINTR. Returns what sendmsg returned: 1 once sent, -1 with errno set.
 */
static ssize_t send_fds_byte(int fd, char byte, const int *fds, int count, int flags) {
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    char buf[CMSG_SPACE(SCM_FDS_MAX * sizeof(int))];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = CMSG_SPACE(count * sizeof(int))};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(count * sizeof(int));
  memcpy(CMSG_DATA(c), fds, count * sizeof(int));
  ssize_t n;
  do n = sendmsg(fd, &msg, flags);
  while (n < 0 && errno == EINTR);
  return n;
}

#endif
