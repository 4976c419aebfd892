// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The version of the LayerPS library a program runs with. One source: the `project()`
// version in the top-level CMakeLists.txt, which also gives the Python package its
// version (bindings/python/pyproject.toml reads it) and every tool its --version line.
#ifndef PS_VERSION_H_
#define PS_VERSION_H_

namespace ps {

// "MAJOR.MINOR.PATCH", e.g. "0.1.0". Thread-safe; the pointer is valid for the process.
const char* Version();

// The git commit the library was configured from (short hash, "+dirty" when the work tree
// had changes), or "unknown" when it was built outside a git checkout (e.g. from an sdist).
const char* BuildCommit();

}  // namespace ps

#endif  // PS_VERSION_H_
