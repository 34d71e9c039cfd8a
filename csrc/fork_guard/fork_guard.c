/* mindio_adaptor._fork_guard: holds CPython's thread-state list lock across fork().

   CPython up to 3.11.7 (gh-112275, fixed in 3.11.8 and 3.12) takes that lock (HEAD_LOCK) in a forked child
   before re-initialising it. A thread of the parent that held it at the moment of the fork leaves the child
   stuck in os.fork() for good. Threads that take it without the GIL, so while another thread forks, are
   native threads entering Python: torch's gloo worker threads do, each time they free a tensor that Python
   dropped (c10d AsyncWork destructor -> decref -> gil_scoped_acquire -> PyThreadState_New), and so do the
   processor's threads here. The fork that met it was Megatron's DataLoader starting its workers: rank 0
   hung at its first step while the other ranks waited for it in the gradient reduce-scatter.

   The guard does what CPython 3.12 does before a fork: the forking thread takes the lock first (a holder
   never waits for anything, so this is short), and both sides of the fork let it go. It is compiled in
   only for the Pythons with the defect. This is C, not C++: CPython's internal headers do not build as
   C++. */
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE_MODULE 1
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0800
#define FORK_GUARD_NEEDED 1
#include <pthread.h>
#include "internal/pycore_runtime.h"

static int installed = 0;

static void take_lock(void) { PyThread_acquire_lock(_PyRuntime.interpreters.mutex, WAIT_LOCK); }
static void give_lock(void) { PyThread_release_lock(_PyRuntime.interpreters.mutex); }
#endif

static PyObject* install(PyObject* self, PyObject* unused) {
#ifdef FORK_GUARD_NEEDED
    if (!installed) {
        int err = pthread_atfork(take_lock, give_lock, give_lock);
        if (err != 0) {
            errno = err;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        installed = 1;
    }
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyObject* needed(PyObject* self, PyObject* unused) {
#ifdef FORK_GUARD_NEEDED
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS,
     "Hold the thread-state list lock across every later fork() of this process (once; idempotent). "
     "-> True where this Python needs it, False where it does nothing."},
    {"needed", needed, METH_NOARGS, "Whether this Python has the fork defect the guard works around."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fork_guard",
                                    "Holds CPython's thread-state list lock across fork() (gh-112275).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__fork_guard(void) { return PyModule_Create(&module); }
