// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// LAYERPS_EXPORT marks what liblayerps.so exports. The shared library is built with hidden
// visibility (CMakeLists.txt, LAYERPS_SHARED): only the public API of include/ps is
// visible to programs that link it; the node runtime, the transport and the store stay
// inside. In a static build the mark changes nothing.
#ifndef PS_EXPORT_H_
#define PS_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define LAYERPS_EXPORT __attribute__((visibility("default")))
#else
#define LAYERPS_EXPORT
#endif

#endif  // PS_EXPORT_H_
