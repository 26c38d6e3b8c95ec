/*
 * tether_native: what the server process itself needs from the OS and Node cannot do.
 *
 *   setDumpable(flag: boolean): void   prctl(PR_SET_DUMPABLE). The server clears it at start,
 *                                       so processes of the same user (every session's
 *                                       children) cannot open /proc/<server>/fd/N, environ or
 *                                       mem, nor ptrace it: the token, the session ids (resume
 *                                       credentials) and other sessions' pipes stay out of reach.
 *   isDumpable(): boolean              prctl(PR_GET_DUMPABLE)
 *
 * On systems without prctl both are no-ops and isDumpable() answers true.
 */
#include <errno.h>
#include <node_api.h>
#include <stdio.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static napi_value throw_errno(napi_env env, const char *what, int err) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_throw_error(env, NULL, msg);
  return NULL;
}

static napi_value set_dumpable(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool flag = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_bool(env, argv[0], &flag) != napi_ok) {
    napi_throw_type_error(env, NULL, "setDumpable(flag: boolean)");
    return NULL;
  }
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

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_property_descriptor props[] = {
      {"setDumpable", NULL, set_dumpable, NULL, NULL, NULL, napi_enumerable, NULL},
      {"isDumpable", NULL, is_dumpable, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}
