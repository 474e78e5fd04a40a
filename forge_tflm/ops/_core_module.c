/* forge_tflm.ops._forge_recalib_core: CPython binding of the FORGE_RECALIB C core.
 *
 * `Prepared(options, s_x, z_x, s_y, z_y, beta, gamma_abs)` is one op node set
 * up like the TFLM kernel's Init/Prepare: options read (through
 * FORGE_RECALIB_OPTION_FIELDS, so no field is named here) and validated,
 * quantization prepared, targets checked and the scratch allocated once.
 * `run(x, y, state, mode, path, variant)` is then one Eval per batch.
 * Arrays come in through the buffer protocol (C-contiguous, format and length
 * checked) and reach the core without copies; no numpy headers are needed.
 * Calls run the host build's bit-exact x86 variant (forge_recalib_s8_hooked
 * with forge_recalib_x86_hooks) unless the ansi reference is asked for. Errors raise ValueError
 * with the core's message. The module also exports the core's enum names and
 * limits, so Python never repeats them. bench/bench_memcpy time loops in C.
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
                 code == 'b' ? "int8" : code == 'i' ? "int32" : "float32");
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

/* Which C function runs: the host variant (the x86 hooks with the best loops
 * this CPU has), the plain reference (forge_recalib_s8_ansi) or the host
 * variant capped at AVX2 (tests the AVX2 loops on AVX-512 CPUs). */
enum { VARIANT_DEFAULT = 0, VARIANT_ANSI = 1, VARIANT_AVX2 = 2, VARIANT_COUNT };

typedef struct {
  PyObject_HEAD
  Buf beta, gamma; /* held for the node's lifetime (constant targets) */
  int32_t c;
  forge_recalib_options opts;
  forge_recalib_quant quant;
  void* scratch;
  size_t scratch_bytes;
} Prepared;

/* code of `value` (a str) in the core's table name_of; -1 if none. */
static int code_of(PyObject* value, const char* (*name_of)(int32_t)) {
  const char* s;
  int32_t i;
  if (!PyUnicode_Check(value)) return -1;
  s = PyUnicode_AsUTF8(value);
  if (s == NULL) {
    PyErr_Clear();
    return -1;
  }
  for (i = 0; name_of(i) != NULL; ++i) {
    if (strcmp(s, name_of(i)) == 0) return i;
  }
  return -1;
}

#define READ_FLOAT(dst, v) ((dst) = (float)PyFloat_AsDouble(v))
#define READ_INT(dst, v) ((dst) = (int32_t)PyLong_AsLong(v))
#define READ_ACTIVATION(dst, v) ((dst) = code_of(v, forge_recalib_activation_name))
#define READ_VARIANCE(dst, v) ((dst) = code_of(v, forge_recalib_variance_name))
#define READ_ARITHMETIC(dst, v) ((dst) = code_of(v, forge_recalib_arithmetic_name))

/* forge_recalib_options from the attributes of a Python options object; an
 * attribute that is None keeps the default. */
static int read_options(PyObject* obj, forge_recalib_options* opts) {
  PyObject* v;
  forge_recalib_options_default(opts);
#define X(field, kind)                                   \
  v = PyObject_GetAttrString(obj, #field);               \
  if (v == NULL) return -1;                              \
  if (v != Py_None) READ_##kind(opts->field, v);         \
  Py_DECREF(v);                                          \
  if (PyErr_Occurred()) return -1;
  FORGE_RECALIB_OPTION_FIELDS(X)
#undef X
  /* use_window: exactly one of window (1) and momentum (0) given, else -1
   * (rejected by validation, as the parser rejects it). */
  {
    PyObject* w = PyObject_GetAttrString(obj, "window");
    PyObject* m = w != NULL ? PyObject_GetAttrString(obj, "momentum") : NULL;
    if (m == NULL) {
      Py_XDECREF(w);
      return -1;
    }
    opts->use_window = (w != Py_None) == (m != Py_None) ? -1 : w != Py_None;
    Py_DECREF(w);
    Py_DECREF(m);
  }
  return 0;
}

static void prepared_dealloc(Prepared* p) {
  release(&p->beta);
  release(&p->gamma);
  PyMem_Free(p->scratch);
  Py_TYPE(p)->tp_free((PyObject*)p);
}

static int prepared_init(Prepared* p, PyObject* args, PyObject* kwds) {
  PyObject *oo, *ob, *og;
  float s_x, s_y;
  int z_x, z_y, status;
  const char* msg = NULL;
  (void)kwds;
  if (!PyArg_ParseTuple(args, "OfifiOO", &oo, &s_x, &z_x, &s_y, &z_y, &ob, &og)) {
    return -1;
  }
  if (p->beta.held || p->scratch != NULL) {
    PyErr_SetString(PyExc_ValueError, "Prepared is already initialized");
    return -1;
  }
  if (read_options(oo, &p->opts) != 0) return -1;
  status = forge_recalib_validate_options(&p->opts, &msg);
  if (status == FORGE_RECALIB_OK) {
    status = forge_recalib_prepare_quant(&p->opts, s_x, z_x, s_y, z_y,
                                         &p->quant, &msg);
  }
  if (status != FORGE_RECALIB_OK) {
    raise_status(status, msg);
    return -1;
  }
  if (get_buf(ob, &p->beta, 0, 'f', 4, -1, "beta")) return -1;
  if (get_buf(og, &p->gamma, 0, 'f', 4, p->beta.view.len / 4, "gamma_abs")) {
    return -1;
  }
  p->c = p->beta.view.len / 4 > FORGE_RECALIB_MAX_C ? 0
                                                    : (int32_t)(p->beta.view.len / 4);
  status = forge_recalib_check_targets((const float*)p->beta.view.buf,
                                       (const float*)p->gamma.view.buf, p->c, &msg);
  if (status != FORGE_RECALIB_OK) {
    raise_status(status, msg);
    return -1;
  }
  p->scratch_bytes = forge_recalib_scratch_bytes(p->c);
  p->scratch = PyMem_Malloc(p->scratch_bytes); /* >= 8-byte aligned */
  if (p->scratch == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

typedef struct {
  Buf x, y, state;
  int32_t n, hw;
} Call;

static void call_release(Call* k) {
  release(&k->x);
  release(&k->y);
  release(&k->state);
}

/* x: int8 [N, ..., C] (N and H*W from its shape), y: int8 like x (may be x),
 * state: float32 [2C] (int32 with arithmetic int). */
static int call_setup(Prepared* p, PyObject* ox, PyObject* oy, PyObject* os,
                      Call* k) {
  Py_ssize_t hw = 1, i;
  memset(k, 0, sizeof(*k));
  if (p->scratch == NULL) {
    PyErr_SetString(PyExc_ValueError, "Prepared is not initialized");
    return -1;
  }
  if (get_buf(ox, &k->x, 0, 'b', 1, -1, "x")) return -1;
  if (k->x.view.ndim < 2 || k->x.view.shape[k->x.view.ndim - 1] != p->c) {
    PyErr_Format(PyExc_ValueError,
                 "x must be [N, ..., C] with C = %d channels (the node's)", (int)p->c);
    call_release(k);
    return -1;
  }
  for (i = 1; i < k->x.view.ndim - 1; ++i) hw *= k->x.view.shape[i];
  if (k->x.view.shape[0] < 1 || k->x.view.shape[0] > FORGE_RECALIB_MAX_M ||
      hw < 1 || hw > FORGE_RECALIB_MAX_M) {
    PyErr_Format(PyExc_ValueError,
                 "FORGE_RECALIB: N and H*W must be in [1, 2^22] (N=%zd, H*W=%zd)",
                 k->x.view.shape[0], hw);
    call_release(k);
    return -1;
  }
  k->n = (int32_t)k->x.view.shape[0];
  k->hw = (int32_t)hw;
  if (get_buf(oy, &k->y, 1, 'b', 1, k->x.view.len, "y") ||
      get_buf(os, &k->state, 1, p->opts.arithmetic == FORGE_RECALIB_ARITH_INT ? 'i' : 'f',
              4, 2 * (Py_ssize_t)p->c, "state")) {
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
  return 0;
}

static int call_run(const Prepared* p, const Call* k, int mode, int path,
                    int variant, const char** msg) {
  const forge_recalib_args args = {
      (const int8_t*)k->x.view.buf, (int8_t*)k->y.view.buf, k->n, k->hw, p->c,
      (const float*)p->beta.view.buf, (const float*)p->gamma.view.buf,
      k->state.view.buf, &p->opts, &p->quant, mode, path, p->scratch,
      p->scratch_bytes};
  if (variant == VARIANT_ANSI) return forge_recalib_s8_ansi(&args, msg);
  return forge_recalib_s8_hooked(
      &args,
      forge_recalib_x86_hooks(variant == VARIANT_AVX2 ? FORGE_RECALIB_X86_AVX2
                                                      : FORGE_RECALIB_X86_AVX512),
      msg);
}

static int check_variant(int variant) {
  if (variant < 0 || variant >= VARIANT_COUNT) {
    PyErr_SetString(PyExc_ValueError, "unknown variant");
    return -1;
  }
  return 0;
}

static PyObject* prepared_run(Prepared* p, PyObject* args) {
  PyObject *ox, *oy, *os;
  int mode, path = FORGE_RECALIB_PATH_AUTO, variant = VARIANT_DEFAULT, status;
  const char* msg = NULL;
  Call k;
  if (!PyArg_ParseTuple(args, "OOOi|ii", &ox, &oy, &os, &mode, &path, &variant)) {
    return NULL;
  }
  if (check_variant(variant) || call_setup(p, ox, oy, os, &k)) return NULL;
  Py_BEGIN_ALLOW_THREADS
  status = call_run(p, &k, mode, path, variant, &msg);
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

static PyObject* prepared_bench(Prepared* p, PyObject* args) {
  PyObject *ox, *oy, *os;
  int mode, path, variant, status;
  const char* msg = NULL;
  long long reps = 0, i;
  int64_t t0, t1;
  Call k;
  if (!PyArg_ParseTuple(args, "OOOiiiL", &ox, &oy, &os, &mode, &path, &variant,
                        &reps)) {
    return NULL;
  }
  if (check_variant(variant) || call_setup(p, ox, oy, os, &k)) return NULL;
  Py_BEGIN_ALLOW_THREADS
  status = call_run(p, &k, mode, path, variant, &msg); /* Untimed warm-up. */
  t0 = now_ns();
  for (i = 0; i < reps && status == FORGE_RECALIB_OK; ++i) {
    status = call_run(p, &k, mode, path, variant, &msg);
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

/* int_state_reset(state): the integer arithmetic's reset values, state int32 [2C]. */
static PyObject* prepared_int_state_reset(Prepared* p, PyObject* args) {
  PyObject* os;
  Buf st;
  int status;
  const char* msg = NULL;
  if (!PyArg_ParseTuple(args, "O", &os)) return NULL;
  if (p->scratch == NULL) {
    PyErr_SetString(PyExc_ValueError, "Prepared is not initialized");
    return NULL;
  }
  if (get_buf(os, &st, 1, 'i', 4, 2 * (Py_ssize_t)p->c, "state")) return NULL;
  status = forge_recalib_int_state_reset(&p->quant, (const float*)p->beta.view.buf,
                                         (const float*)p->gamma.view.buf, p->c,
                                         (int32_t*)st.view.buf, &msg);
  release(&st);
  if (status != FORGE_RECALIB_OK) return raise_status(status, msg);
  Py_RETURN_NONE;
}

static PyObject* prepared_mode_for(Prepared* p, PyObject* args) {
  int mode;
  if (!PyArg_ParseTuple(args, "i", &mode)) return NULL;
  return PyLong_FromLong(forge_recalib_mode_for(&p->opts, mode));
}

static PyObject* prepared_quant(Prepared* p, void* closure) {
  (void)closure;
  return Py_BuildValue("(fffii)", p->quant.r, p->quant.inv_sy, p->quant.sx2,
                       p->quant.qmin, p->quant.qmax);
}

static PyObject* prepared_channels(Prepared* p, void* closure) {
  (void)closure;
  return PyLong_FromLong(p->c);
}

static PyMethodDef kPreparedMethods[] = {
    {"mode_for", (PyCFunction)prepared_mode_for, METH_VARARGS,
     "mode_for(mode) -> the mode this op runs for `mode` (ADAPT_SAFE resolved)"},
    {"run", (PyCFunction)prepared_run, METH_VARARGS,
     "run(x, y, state, mode[, path[, variant]]): one invocation; y may be x."
     " variant: 0 host (default), 1 ansi, 2 host capped at AVX2"},
    {"int_state_reset", (PyCFunction)prepared_int_state_reset, METH_VARARGS,
     "int_state_reset(state): the integer arithmetic's reset state, int32 [2C]"},
    {"bench", (PyCFunction)prepared_bench, METH_VARARGS,
     "bench(x, y, state, mode, path, variant, reps) -> total ns of reps calls"
     " (after 1 untimed warm-up)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef kPreparedGetSet[] = {
    {"quant", (getter)prepared_quant, NULL,
     "(r, inv_sy, sx2, qmin, qmax) as prepared by the core", NULL},
    {"channels", (getter)prepared_channels, NULL, "C", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject kPreparedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "forge_tflm.ops._forge_recalib_core.Prepared",
    .tp_basicsize = sizeof(Prepared),
    .tp_dealloc = (destructor)prepared_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Prepared(options, s_x, z_x, s_y, z_y, beta, gamma_abs): one"
              " FORGE_RECALIB node, set up once",
    .tp_methods = kPreparedMethods,
    .tp_getset = kPreparedGetSet,
    .tp_init = (initproc)prepared_init,
    .tp_new = PyType_GenericNew,
};

static PyObject* py_scratch_bytes(PyObject* self, PyObject* args) {
  int c;
  (void)self;
  if (!PyArg_ParseTuple(args, "i", &c)) return NULL;
  return Py_BuildValue("(nn)", (Py_ssize_t)forge_recalib_scratch_bytes_affine(c),
                       (Py_ssize_t)forge_recalib_scratch_bytes(c));
}

static PyObject* py_state_bytes(PyObject* self, PyObject* args) {
  int c;
  (void)self;
  if (!PyArg_ParseTuple(args, "i", &c)) return NULL;
  return PyLong_FromSize_t(forge_recalib_state_bytes(c));
}

static PyMethodDef kMethods[] = {
    {"bench_memcpy", py_bench_memcpy, METH_VARARGS,
     "bench_memcpy(dst, src, reps) -> total ns (after 1 warm-up)"},
    {"state_reset", py_state_reset, METH_VARARGS,
     "state_reset(beta, gamma_abs, state)"},
    {"state_bytes", py_state_bytes, METH_VARARGS,
     "state_bytes(c) -> bytes of an op's state block"},
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

/* (name_of(0), name_of(1), ...): an enum's spelling, index = code. */
static PyObject* names_tuple(const char* (*name_of)(int32_t)) {
  int32_t n = 0, i;
  PyObject* t;
  while (name_of(n) != NULL) ++n;
  t = PyTuple_New(n);
  if (t == NULL) return NULL;
  for (i = 0; i < n; ++i) {
    PyObject* s = PyUnicode_FromString(name_of(i));
    if (s == NULL) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, s);
  }
  return t;
}

static int add_object(PyObject* m, const char* name, PyObject* value) {
  if (value == NULL) return -1;
  if (PyModule_AddObject(m, name, value) != 0) {
    Py_DECREF(value);
    return -1;
  }
  return 0;
}

PyMODINIT_FUNC PyInit__forge_recalib_core(void) {
  PyObject* m;
  int active = forge_recalib_x86_active();
  if (PyType_Ready(&kPreparedType) < 0) return NULL;
  m = PyModule_Create(&kModule);
  if (m == NULL) return NULL;
  Py_INCREF(&kPreparedType);
  /* The option fields in SPEC order, as (name, kind) pairs. */
#define X(field, kind) "(ss)"
#define Y(field, kind) , #field, #kind
  if (add_object(m, "Prepared", (PyObject*)&kPreparedType) != 0 ||
      add_object(m, "OPTION_FIELDS",
                 Py_BuildValue("(" FORGE_RECALIB_OPTION_FIELDS(X) ")"
                               FORGE_RECALIB_OPTION_FIELDS(Y))) != 0 ||
#undef X
#undef Y
      add_object(m, "ACTIVATIONS", names_tuple(forge_recalib_activation_name)) != 0 ||
      add_object(m, "VARIANCES", names_tuple(forge_recalib_variance_name)) != 0 ||
      add_object(m, "ARITHMETICS", names_tuple(forge_recalib_arithmetic_name)) != 0 ||
      add_object(m, "MODES", names_tuple(forge_recalib_mode_name)) != 0 ||
      add_object(m, "PATHS", names_tuple(forge_recalib_path_name)) != 0 ||
      add_object(m, "VARIANTS", Py_BuildValue("(sss)", "default", "ansi", "avx2")) != 0 ||
      add_object(m, "SCALE_MIN", PyFloat_FromDouble(FORGE_RECALIB_SCALE_MIN)) != 0 ||
      add_object(m, "SCALE_MAX", PyFloat_FromDouble(FORGE_RECALIB_SCALE_MAX)) != 0 ||
      add_object(m, "TARGET_MAX", PyFloat_FromDouble(FORGE_RECALIB_TARGET_MAX)) != 0 ||
      add_object(m, "DEFAULT_EPS", PyFloat_FromDouble(FORGE_RECALIB_DEFAULT_EPS)) != 0 ||
      PyModule_AddIntConstant(m, "MAX_M", FORGE_RECALIB_MAX_M) != 0 ||
      PyModule_AddIntConstant(m, "MAX_C", FORGE_RECALIB_MAX_C) != 0 ||
      PyModule_AddIntConstant(m, "MAX_OPTIONS_BYTES",
                              FORGE_RECALIB_MAX_OPTIONS_BYTES) != 0 ||
      /* Arena accounting per node on 32-bit TFLM (forge_recalib.h). */
      PyModule_AddIntConstant(m, "OP_DATA_BYTES_ILP32",
                              FORGE_RECALIB_OP_DATA_BYTES_ILP32) != 0 ||
      PyModule_AddIntConstant(m, "TFLM_NODE_BYTES_ILP32",
                              FORGE_RECALIB_TFLM_NODE_BYTES_ILP32) != 0 ||
      PyModule_AddIntConstant(m, "ARENA_ALIGN", FORGE_RECALIB_ARENA_ALIGN) != 0 ||
      /* Smallest N*H*W for which path "auto" uses the table (build setting);
       * which loops variant "default" runs on this machine. */
      PyModule_AddIntConstant(m, "LUT_MIN_M", FORGE_RECALIB_LUT_MIN_M) != 0 ||
      PyModule_AddStringConstant(
          m, "DEFAULT_VARIANT",
          active == FORGE_RECALIB_X86_AVX512 ? "x86_avx512"
          : active == FORGE_RECALIB_X86_AVX2 ? "x86_avx2"
                                             : "ansi") != 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
