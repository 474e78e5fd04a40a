/* forge_tflm.ops._forge_recalib_core: CPython binding of the FORGE_RECALIB C core.
 *
 * Arrays come in through the buffer protocol (C-contiguous, format and length
 * checked) and are passed to the core without copies; no numpy headers are
 * needed. The scratch buffer is the only allocation, made here because the
 * core never allocates. Calls run forge_recalib_s8_x86_path (the host build's
 * bit-exact SIMD variant) unless the ansi reference is asked for. Errors
 * raise ValueError with the core's message.
 * bench_s8/bench_memcpy time loops in C so the benchmark ratio is fair.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "forge_recalib.h"

typedef struct {
  Py_buffer view;
  int held;
} Buf;

static void release(Buf* b) {
  if (b->held) PyBuffer_Release(&b->view);
  b->held = 0;
}

/* Accepts native formats "b"/"f" (optionally prefixed by '@', '=' or '<' on
 * little-endian hosts, as numpy may write them). */
static int format_is(const char* fmt, char code) {
  if (fmt == NULL) return code == 'B';
  if (fmt[0] == '@' || fmt[0] == '=') ++fmt;
#if PY_LITTLE_ENDIAN
  else if (fmt[0] == '<') ++fmt;
#endif
  return fmt[0] == code && fmt[1] == '\0';
}

/* expected_items < 0: length is checked by the caller later. */
static int get_buf(PyObject* obj, Buf* b, int writable, char code,
                   Py_ssize_t itemsize, Py_ssize_t expected_items,
                   const char* name) {
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
  if (writable) flags |= PyBUF_WRITABLE;
  b->held = 0;
  if (PyObject_GetBuffer(obj, &b->view, flags) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous%s buffer", name,
                 writable ? " writable" : "");
    return -1;
  }
  b->held = 1;
  if (b->view.itemsize != itemsize || !format_is(b->view.format, code)) {
    PyErr_Format(PyExc_ValueError, "%s must have dtype %s", name,
                 code == 'b' ? "int8" : "float32");
    release(b);
    return -1;
  }
  if (expected_items >= 0 && b->view.len != expected_items * itemsize) {
    PyErr_Format(PyExc_ValueError, "%s has %zd elements, expected %zd", name,
                 b->view.len / itemsize, expected_items);
    release(b);
    return -1;
  }
  return 0;
}

static PyObject* raise_status(int status, const char* msg) {
  PyErr_Format(PyExc_ValueError, "FORGE_RECALIB: %s (%s)",
               msg != NULL ? msg : "error", forge_recalib_status_string(status));
  return NULL;
}

/* Which C function runs: the host variant (forge_recalib_s8_x86_path with
 * the best loops this CPU has), the plain reference (forge_recalib_s8_ansi_path)
 * or the host variant capped at AVX2 (tests the AVX2 loops on AVX-512 CPUs). */
enum { VARIANT_DEFAULT = 0, VARIANT_ANSI = 1, VARIANT_AVX2 = 2 };

typedef struct {
  Buf x, y, beta, gamma, state;
  int n, hw, c, use_window, window, act, variance, z_x, z_y, mode, path;
  int variant;
  float momentum, eps, s_x, s_y;
  forge_recalib_options opts;
  forge_recalib_quant quant;
  void* scratch;
  size_t scratch_bytes;
} Call;

static void call_release(Call* k) {
  release(&k->x);
  release(&k->y);
  release(&k->beta);
  release(&k->gamma);
  release(&k->state);
  PyMem_Free(k->scratch);
  k->scratch = NULL;
}

/* Parses (x, y, beta, gamma_abs, state, n, hw, c, use_window, momentum, window,
 * eps, activation, variance, s_x, z_x, s_y, z_y, mode, path[, extra int]
 * [, variant]). */
static int call_setup(PyObject* args, Call* k, long long* extra) {
  PyObject *ox, *oy, *ob, *og, *os;
  const char* msg = NULL;
  int status;
  long long items = -1;
  memset(k, 0, sizeof(*k));
  if (extra != NULL) {
    if (!PyArg_ParseTuple(args, "OOOOOiiiififiififiiiL|i", &ox, &oy, &ob,
                          &og, &os, &k->n, &k->hw, &k->c, &k->use_window,
                          &k->momentum, &k->window, &k->eps, &k->act,
                          &k->variance, &k->s_x, &k->z_x, &k->s_y, &k->z_y,
                          &k->mode, &k->path, extra, &k->variant)) {
      return -1;
    }
  } else if (!PyArg_ParseTuple(args, "OOOOOiiiififiififiii|i", &ox, &oy, &ob,
                               &og, &os, &k->n, &k->hw, &k->c, &k->use_window,
                               &k->momentum, &k->window, &k->eps, &k->act,
                               &k->variance, &k->s_x, &k->z_x, &k->s_y,
                               &k->z_y, &k->mode, &k->path, &k->variant)) {
    return -1;
  }
  if (k->variant != VARIANT_DEFAULT && k->variant != VARIANT_ANSI &&
      k->variant != VARIANT_AVX2) {
    PyErr_SetString(PyExc_ValueError, "unknown variant");
    return -1;
  }
  /* Buffer lengths are checked only for shapes the core accepts; otherwise
   * the core reports the shape error without touching memory. */
  if (k->n >= 1 && k->hw >= 1 && k->c >= 1 && k->n <= FORGE_RECALIB_MAX_M &&
      k->hw <= FORGE_RECALIB_MAX_M && k->c <= FORGE_RECALIB_MAX_C) {
    items = (long long)k->n * k->hw * k->c;
  }
  if (get_buf(ox, &k->x, 0, 'b', 1, (Py_ssize_t)items, "x") ||
      get_buf(oy, &k->y, 1, 'b', 1, (Py_ssize_t)items, "y") ||
      get_buf(ob, &k->beta, 0, 'f', 4, k->c, "beta") ||
      get_buf(og, &k->gamma, 0, 'f', 4, k->c, "gamma_abs") ||
      get_buf(os, &k->state, 1, 'f', 4, 2 * (Py_ssize_t)k->c, "state")) {
    call_release(k);
    return -1;
  }
  if (k->y.view.buf != k->x.view.buf && k->x.view.len > 0 &&
      (char*)k->y.view.buf < (char*)k->x.view.buf + k->x.view.len &&
      (char*)k->x.view.buf < (char*)k->y.view.buf + k->y.view.len) {
    PyErr_SetString(PyExc_ValueError, "y must be x itself or not overlap it");
    call_release(k);
    return -1;
  }
  forge_recalib_options_default(&k->opts);
  k->opts.use_window = k->use_window;
  k->opts.momentum = k->momentum;
  k->opts.window = k->window;
  k->opts.eps = k->eps;
  k->opts.activation = k->act;
  k->opts.variance = k->variance;
  status = forge_recalib_prepare_quant(&k->opts, k->s_x, k->z_x, k->s_y,
                                       k->z_y, &k->quant, &msg);
  if (status == FORGE_RECALIB_OK) {
    status = forge_recalib_check_targets((const float*)k->beta.view.buf,
                                         (const float*)k->gamma.view.buf, k->c,
                                         &msg);
  }
  if (status != FORGE_RECALIB_OK) {
    call_release(k);
    raise_status(status, msg);
    return -1;
  }
  k->scratch_bytes = forge_recalib_scratch_bytes(k->c);
  if (k->scratch_bytes == 0) {
    k->scratch = NULL; /* The core rejects the shape before using scratch. */
  } else {
    k->scratch = PyMem_Malloc(k->scratch_bytes); /* >= 8-byte aligned */
    if (k->scratch == NULL) {
      call_release(k);
      PyErr_NoMemory();
      return -1;
    }
  }
  return 0;
}

static int call_run(Call* k, const char** msg) {
  static uint64_t dummy[1];
  void* scratch = k->scratch != NULL ? k->scratch : (void*)dummy;
  if (k->variant != VARIANT_ANSI) {
    return forge_recalib_s8_x86_path(
        (const int8_t*)k->x.view.buf, (int8_t*)k->y.view.buf, k->n, k->hw,
        k->c, (const float*)k->beta.view.buf, (const float*)k->gamma.view.buf,
        (float*)k->state.view.buf, &k->opts, &k->quant, k->mode, k->path,
        k->variant == VARIANT_AVX2 ? FORGE_RECALIB_X86_AVX2
                                   : FORGE_RECALIB_X86_AVX512,
        scratch, k->scratch != NULL ? k->scratch_bytes : 0, msg);
  }
  return forge_recalib_s8_ansi_path(
      (const int8_t*)k->x.view.buf, (int8_t*)k->y.view.buf, k->n, k->hw, k->c,
      (const float*)k->beta.view.buf, (const float*)k->gamma.view.buf,
      (float*)k->state.view.buf, &k->opts, &k->quant, k->mode, k->path,
      scratch, k->scratch != NULL ? k->scratch_bytes : 0, msg);
}

static PyObject* py_s8(PyObject* self, PyObject* args) {
  Call k;
  const char* msg = NULL;
  int status;
  (void)self;
  if (call_setup(args, &k, NULL) != 0) return NULL;
  Py_BEGIN_ALLOW_THREADS
  status = call_run(&k, &msg);
  Py_END_ALLOW_THREADS
  call_release(&k);
  if (status != FORGE_RECALIB_OK) return raise_status(status, msg);
  Py_RETURN_NONE;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static PyObject* py_bench_s8(PyObject* self, PyObject* args) {
  Call k;
  const char* msg = NULL;
  int status = FORGE_RECALIB_OK;
  long long reps = 0, i;
  int64_t t0, t1;
  (void)self;
  if (call_setup(args, &k, &reps) != 0) return NULL;
  Py_BEGIN_ALLOW_THREADS
  status = call_run(&k, &msg); /* Untimed warm-up: page faults, caches. */
  t0 = now_ns();
  for (i = 0; i < reps && status == FORGE_RECALIB_OK; ++i) {
    status = call_run(&k, &msg);
  }
  t1 = now_ns();
  Py_END_ALLOW_THREADS
  call_release(&k);
  if (status != FORGE_RECALIB_OK) return raise_status(status, msg);
  return PyLong_FromLongLong((long long)(t1 - t0));
}

/* Called through a volatile pointer so the copies cannot be optimized away. */
static void* (*volatile memcpy_fn)(void*, const void*, size_t) = memcpy;

static PyObject* py_bench_memcpy(PyObject* self, PyObject* args) {
  PyObject *od, *os;
  Buf d, s;
  long long reps, i;
  int64_t t0, t1;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOL", &od, &os, &reps)) return NULL;
  if (get_buf(od, &d, 1, 'b', 1, -1, "dst")) return NULL;
  if (get_buf(os, &s, 0, 'b', 1, d.view.len, "src")) {
    release(&d);
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  memcpy_fn(d.view.buf, s.view.buf, (size_t)d.view.len); /* Untimed warm-up. */
  t0 = now_ns();
  for (i = 0; i < reps; ++i) memcpy_fn(d.view.buf, s.view.buf, (size_t)d.view.len);
  t1 = now_ns();
  Py_END_ALLOW_THREADS
  release(&d);
  release(&s);
  return PyLong_FromLongLong((long long)(t1 - t0));
}

static PyObject* py_state_reset(PyObject* self, PyObject* args) {
  PyObject *ob, *og, *os;
  Buf b, g, s;
  const char* msg = NULL;
  int status;
  Py_ssize_t c;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOO", &ob, &og, &os)) return NULL;
  if (get_buf(ob, &b, 0, 'f', 4, -1, "beta")) return NULL;
  c = b.view.len / 4;
  if (get_buf(og, &g, 0, 'f', 4, c, "gamma_abs")) {
    release(&b);
    return NULL;
  }
  if (get_buf(os, &s, 1, 'f', 4, 2 * c, "state")) {
    release(&b);
    release(&g);
    return NULL;
  }
  status = forge_recalib_state_reset(
      (const float*)b.view.buf, (const float*)g.view.buf,
      c > FORGE_RECALIB_MAX_C ? 0 : (int32_t)c, (float*)s.view.buf, &msg);
  release(&b);
  release(&g);
  release(&s);
  if (status != FORGE_RECALIB_OK) return raise_status(status, msg);
  Py_RETURN_NONE;
}

static PyObject* py_prepare_quant(PyObject* self, PyObject* args) {
  int act, z_x, z_y, status;
  float s_x, s_y;
  const char* msg = NULL;
  forge_recalib_options opts;
  forge_recalib_quant q;
  (void)self;
  if (!PyArg_ParseTuple(args, "ififi", &act, &s_x, &z_x, &s_y, &z_y)) return NULL;
  forge_recalib_options_default(&opts);
  opts.use_window = 0; /* Only the activation matters here. */
  opts.activation = act;
  status = forge_recalib_prepare_quant(&opts, s_x, z_x, s_y, z_y, &q, &msg);
  if (status != FORGE_RECALIB_OK) return raise_status(status, msg);
  return Py_BuildValue("(fffii)", q.r, q.inv_sy, q.sx2, q.qmin, q.qmax);
}

static PyObject* py_scratch_bytes(PyObject* self, PyObject* args) {
  int c;
  (void)self;
  if (!PyArg_ParseTuple(args, "i", &c)) return NULL;
  return Py_BuildValue("(nn)", (Py_ssize_t)forge_recalib_scratch_bytes_affine(c),
                       (Py_ssize_t)forge_recalib_scratch_bytes(c));
}

static PyMethodDef kMethods[] = {
    {"s8", py_s8, METH_VARARGS,
     "s8(x, y, beta, gamma_abs, state, n, hw, c, use_window, momentum, window,"
     " eps, activation, variance, s_x, z_x, s_y, z_y, mode, path[, variant])"
     " variant: 0 host (default), 1 ansi, 2 host capped at AVX2"},
    {"bench_s8", py_bench_s8, METH_VARARGS,
     "bench_s8(<s8 args>, reps[, variant]) -> total ns of reps calls (after 1"
     " warm-up)"},
    {"bench_memcpy", py_bench_memcpy, METH_VARARGS,
     "bench_memcpy(dst, src, reps) -> total ns (after 1 warm-up)"},
    {"state_reset", py_state_reset, METH_VARARGS,
     "state_reset(beta, gamma_abs, state)"},
    {"prepare_quant", py_prepare_quant, METH_VARARGS,
     "prepare_quant(activation, s_x, z_x, s_y, z_y) -> (r, inv_sy, sx2, qmin,"
     " qmax)"},
    {"scratch_bytes", py_scratch_bytes, METH_VARARGS,
     "scratch_bytes(c) -> (affine_bytes, any_path_bytes)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                                     "_forge_recalib_core",
                                     "FORGE_RECALIB C core binding.",
                                     -1,
                                     kMethods,
                                     NULL,
                                     NULL,
                                     NULL,
                                     NULL};

PyMODINIT_FUNC PyInit__forge_recalib_core(void) {
  PyObject* m = PyModule_Create(&kModule);
  if (m == NULL) return NULL;
  /* Smallest N*H*W for which path "auto" uses the table (build setting);
   * which loops variant "default" runs on this machine. */
  if (PyModule_AddIntConstant(m, "LUT_MIN_M", FORGE_RECALIB_LUT_MIN_M) != 0 ||
      PyModule_AddStringConstant(
          m, "DEFAULT_VARIANT",
          forge_recalib_x86_active() == FORGE_RECALIB_X86_AVX512 ? "x86_avx512"
          : forge_recalib_x86_active() == FORGE_RECALIB_X86_AVX2 ? "x86_avx2"
                                                                  : "ansi") != 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
