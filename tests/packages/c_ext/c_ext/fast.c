#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* dot(a, b): the dot product of two equal-length sequences of floats. */
static PyObject *dot(PyObject *self, PyObject *args) {
    PyObject *a, *b;
    if (!PyArg_ParseTuple(args, "OO", &a, &b)) return NULL;
    Py_ssize_t n = PySequence_Length(a);
    if (n < 0 || n != PySequence_Length(b)) {
        PyErr_SetString(PyExc_ValueError, "sequences must have the same length");
        return NULL;
    }
    double acc = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_GetItem(a, i), *y = PySequence_GetItem(b, i);
        if (!x || !y) { Py_XDECREF(x); Py_XDECREF(y); return NULL; }
        acc += PyFloat_AsDouble(x) * PyFloat_AsDouble(y);
        Py_DECREF(x); Py_DECREF(y);
        if (PyErr_Occurred()) return NULL;
    }
    return PyFloat_FromDouble(acc);
}

static PyMethodDef methods[] = {{"dot", dot, METH_VARARGS, "dot product"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast", NULL, -1, methods};
PyMODINIT_FUNC PyInit__fast(void) { return PyModule_Create(&module); }
