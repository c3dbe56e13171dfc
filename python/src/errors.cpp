// tessera's exceptions as Python exceptions of the matching built-in types, with the same messages:
// ValueError (and IndexError) for caller mistakes, TimeoutError, OSError for files, MemoryError past
// the budget, NotImplementedError, and tessera.PeerFailureError (a RuntimeError) for a lost peer.
#include "tessera/core/error.h"

#include "python/src/bindings.h"

namespace tessera::python {

void bind_errors(py::module_& m) {
  static py::exception<PeerFailureError> peer_failure(m, "PeerFailureError", PyExc_RuntimeError);
  static py::exception<Error> other(m, "TesseraError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const TimeoutError& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const OutOfMemoryError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const NotSupportedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const PeerFailureError& e) {
      peer_failure(e.what());
    } catch (const Error& e) {
      other(e.what());
    }
  });
}

}  // namespace tessera::python
