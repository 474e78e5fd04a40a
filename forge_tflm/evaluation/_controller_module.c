/* forge_tflm.evaluation._forge_controller: CPython binding of the field controller
 * (custom_ops/forge_controller/src/forge_controller.h), so the evaluator drives the code a device
 * runs and no rule of it is written twice.
 *
 * Controller(settings: dict, num_classes, output_scale, output_zero_point): settings
 * named as in forge_controller_settings.h (missing ones take their defaults).
 * .next() is the next step (STEP_*), .probed(source, adapted, n) takes both paths'
 * int8 outputs of n images (C-contiguous, n * num_classes bytes each) and returns the
 * event (EVENT_*), .ran(outputs, n) takes the outputs of n images outside a probe. SETTINGS lists the
 * X-macro's (name, MACRO, type, default, help) so Python never repeats them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "forge_controller.h"

typedef struct {
  PyObject_HEAD
  ForgeController c;
} ControllerObject;

/* One setting from the dict (a missing key keeps the default). */
static int set_u32(PyObject* d, const char* name, uint32_t* out) {
  PyObject* v = PyDict_GetItemString(d, name);
  if (v == NULL) return 0;
  unsigned long x = PyLong_AsUnsignedLong(v);
  if (PyErr_Occurred() || x > UINT32_MAX) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "gate setting %s must be an integer in [0, 2^32)", name);
    return -1;
  }
  *out = (uint32_t)x;
  return 0;
}

static int set_f64(PyObject* d, const char* name, double* out) {
  PyObject* v = PyDict_GetItemString(d, name);
  if (v == NULL) return 0;
  double x = PyFloat_AsDouble(v);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "gate setting %s must be a number", name);
    return -1;
  }
  *out = x;
  return 0;
}

static int read_settings(PyObject* d, ForgeControllerSettings* s) {
  forge_controller_default_settings(s);
  Py_ssize_t known = 0;
#define READ(type, name, macro, value, help)              \
  if (set_##type(d, #name, &s->name) != 0) return -1;     \
  known += PyDict_GetItemString(d, #name) != NULL;
  FORGE_CONTROLLER_SETTINGS(READ)
#undef READ
  if (known != PyDict_Size(d)) {
    PyErr_SetString(PyExc_ValueError, "unknown gate setting (see SETTINGS)");
    return -1;
  }
  const char* bad = forge_controller_check(s);
  if (bad != NULL) {
    PyErr_Format(PyExc_ValueError, "gate setting %s is out of range", bad);
    return -1;
  }
  return 0;
}

static int controller_init(ControllerObject* self, PyObject* args, PyObject* kwargs) {
  static char* kw[] = {"settings", "num_classes", "output_scale", "output_zero_point", NULL};
  PyObject* d;
  int classes, zp;
  float scale;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!ifi", kw, &PyDict_Type, &d, &classes,
                                   &scale, &zp)) {
    return -1;
  }
  ForgeControllerSettings s;
  if (read_settings(d, &s) != 0) return -1;
  if (!forge_controller_init(&self->c, &s, classes, scale, zp)) {
    PyErr_Format(PyExc_ValueError, "the gate needs 1 to %d classes and an output scale > 0",
                 FORGE_CONTROLLER_MAX_CLASSES);
    return -1;
  }
  return 0;
}

static PyObject* controller_next(ControllerObject* self, PyObject* unused) {
  (void)unused;
  return PyLong_FromLong(forge_controller_next(&self->c));
}

static PyObject* controller_op_mode(ControllerObject* self, PyObject* args) {
  int step;
  if (!PyArg_ParseTuple(args, "i", &step)) return NULL;
  if (step < 0 || step > FORGE_CONTROLLER_FROZEN) {
    PyErr_Format(PyExc_ValueError, "op_mode: unknown step %d", step);
    return NULL;
  }
  return PyLong_FromLong(forge_controller_op_mode(&self->c, (ForgeControllerStep)step));
}

static PyObject* controller_probed(ControllerObject* self, PyObject* args) {
  Py_buffer src, adp;
  unsigned int n;
  if (!PyArg_ParseTuple(args, "y*y*I", &src, &adp, &n)) return NULL;
  PyObject* result = NULL;
  const Py_ssize_t want = (Py_ssize_t)n * self->c.num_classes;
  if (src.len != want || adp.len != want) {
    PyErr_Format(PyExc_ValueError, "probed: each path needs %zd int8 outputs", want);
  } else {
    result = PyLong_FromLong(forge_controller_probed(
        &self->c, (const int8_t*)src.buf, (const int8_t*)adp.buf, n));
  }
  PyBuffer_Release(&src);
  PyBuffer_Release(&adp);
  return result;
}

static PyObject* controller_ran(ControllerObject* self, PyObject* args) {
  Py_buffer out;
  unsigned int n;
  if (!PyArg_ParseTuple(args, "y*I", &out, &n)) return NULL;
  PyObject* result = NULL;
  const Py_ssize_t want = (Py_ssize_t)n * self->c.num_classes;
  if (out.len != want) {
    PyErr_Format(PyExc_ValueError, "ran: needs %zd int8 outputs", want);
  } else {
    forge_controller_ran(&self->c, (const int8_t*)out.buf, n);
    result = Py_None;
    Py_INCREF(result);
  }
  PyBuffer_Release(&out);
  return result;
}

static PyObject* get_score(ControllerObject* self, void* unused) {
  (void)unused;
  return PyFloat_FromDouble(forge_controller_score(&self->c));
}

static PyObject* get_rate(ControllerObject* self, void* which) {
  const char* w = (const char*)which;
  return PyFloat_FromDouble(w[0] == 'a' ? forge_controller_agreement(&self->c)
                                        : forge_controller_chance(&self->c));
}

static PyObject* get_flag(ControllerObject* self, void* which) {
  const ForgeController* c = &self->c;
  const char* w = (const char*)which;
  if (w[0] == 'p') return PyBool_FromLong(c->probing);
  if (w[0] == 'a') return PyBool_FromLong(c->adapting);
  return PyBool_FromLong(forge_controller_correlated(c));
}

static PyObject* get_count(ControllerObject* self, void* which) {
  const char* w = (const char*)which;
  return PyLong_FromUnsignedLong(w[0] == 'd' ? self->c.decisions : self->c.probed);
}

static PyMethodDef controller_methods[] = {
    {"next", (PyCFunction)controller_next, METH_NOARGS, "The next step (STEP_*)."},
    {"op_mode", (PyCFunction)controller_op_mode, METH_VARARGS,
     "op_mode(step): the op's mode code for a step (STEP_PROBE: its adapting pass)."},
    {"probed", (PyCFunction)controller_probed, METH_VARARGS,
     "probed(source, adapted, n): n probed images; returns the event (EVENT_*)."},
    {"ran", (PyCFunction)controller_ran, METH_VARARGS,
     "ran(outputs, n): the outputs of n images outside a probe."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef controller_getset[] = {
    {"probing", (getter)get_flag, NULL, NULL, "probing"},
    {"adapting", (getter)get_flag, NULL, NULL, "adapting"},
    {"decisions", (getter)get_count, NULL, NULL, "decisions"},
    {"probed_images", (getter)get_count, NULL, NULL, "probed"},
    {"score", (getter)get_score, NULL, NULL, NULL},
    {"correlated", (getter)get_flag, NULL, NULL, "correlated"},
    {"agreement", (getter)get_rate, NULL, NULL, "agreement"},
    {"chance", (getter)get_rate, NULL, NULL, "chance"},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject ControllerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "forge_tflm.evaluation._forge_controller.Controller",
    .tp_basicsize = sizeof(ControllerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The field controller (custom_ops/forge_controller/src/forge_controller.h).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)controller_init,
    .tp_methods = controller_methods,
    .tp_getset = controller_getset,
};

static PyObject* settings_table(void) {
  PyObject* rows = PyList_New(0);
  if (rows == NULL) return NULL;
#define ROW(type, name, macro, value, help)                                            \
  {                                                                                      \
    PyObject* row = Py_BuildValue("(sssds)", #name, #macro, #type, (double)(value), help); \
    if (row == NULL || PyList_Append(rows, row) != 0) {                                  \
      Py_XDECREF(row);                                                                   \
      Py_DECREF(rows);                                                                   \
      return NULL;                                                                       \
    }                                                                                    \
    Py_DECREF(row);                                                                      \
  }
  FORGE_CONTROLLER_SETTINGS(ROW)
#undef ROW
  PyObject* table = PyList_AsTuple(rows);
  Py_DECREF(rows);
  return table;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_forge_controller",
                                    "The field controller's C code.", -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__forge_controller(void) {
  if (PyType_Ready(&ControllerType) < 0) return NULL;
  PyObject* m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  Py_INCREF(&ControllerType);
  if (PyModule_AddObject(m, "Controller", (PyObject*)&ControllerType) < 0 ||
      PyModule_AddObject(m, "SETTINGS", settings_table()) < 0 ||
      PyModule_AddIntConstant(m, "MAX_CLASSES", FORGE_CONTROLLER_MAX_CLASSES) < 0 ||
      PyModule_AddIntConstant(m, "STEP_PROBE", FORGE_CONTROLLER_PROBE) < 0 ||
      PyModule_AddIntConstant(m, "STEP_ADAPT", FORGE_CONTROLLER_ADAPT) < 0 ||
      PyModule_AddIntConstant(m, "STEP_ADAPT_SAFE", FORGE_CONTROLLER_ADAPT_SAFE) < 0 ||
      PyModule_AddIntConstant(m, "STEP_FROZEN", FORGE_CONTROLLER_FROZEN) < 0 ||
      PyModule_AddIntConstant(m, "EVENT_NONE", FORGE_CONTROLLER_NONE) < 0 ||
      PyModule_AddIntConstant(m, "EVENT_ON", FORGE_CONTROLLER_ON) < 0 ||
      PyModule_AddIntConstant(m, "EVENT_OFF", FORGE_CONTROLLER_OFF) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
