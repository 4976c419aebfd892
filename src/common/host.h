// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Facts about the machine a node runs on.
#ifndef PS_COMMON_HOST_H_
#define PS_COMMON_HOST_H_

#include <unistd.h>

#include <string>

namespace ps {

// This machine's hostname (empty when the system will not say).
inline std::string LocalHostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return std::string();
  return name;
}

}  // namespace ps

#endif  // PS_COMMON_HOST_H_
