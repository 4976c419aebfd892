// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/curve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ps {

bool CurveAvailable() { return zmq_has("curve") != 0; }

namespace {

StatusOr<CurveKeys> FromSecret(const std::string& secret, const std::string& where) {
  if (secret.size() != 40) {
    return InvalidArgument(where + ": the key must be 40 Z85 characters, not " +
                           std::to_string(secret.size()));
  }
  uint8_t raw[32];
  if (zmq_z85_decode(raw, secret.c_str()) == nullptr) {
    return InvalidArgument(where + ": the key is not valid Z85");
  }
  std::memset(raw, 0, sizeof(raw));
  char pub[41] = {0};
  if (zmq_curve_public(pub, secret.c_str()) != 0) {
    return InvalidArgument(where + ": cannot derive the public key: " + zmq_strerror(zmq_errno()));
  }
  return CurveKeys{std::string(pub, 40), secret};
}

}  // namespace

StatusOr<CurveKeys> LoadCurveKeys(const std::string& path) {
  if (!CurveAvailable()) {
    return FailedPrecondition("curve_key_file is set, but this libzmq was built without CURVE "
                              "(libsodium)");
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return IoError("curve_key_file " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return IoError("curve_key_file " + path + ": not a regular file");
  if ((st.st_mode & 077) != 0) {
    return PermissionDenied("curve_key_file " + path +
                            " may be read by others (chmod 600 it): it holds the cluster's "
                            "secret key");
  }
  std::ifstream in(path);
  if (!in) return IoError("curve_key_file " + path + ": cannot read it");
  std::string line;
  int lines = 0;
  while (std::getline(in, line) && ++lines <= 64) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    return FromSecret(line.substr(start), "curve_key_file " + path);
  }
  return InvalidArgument("curve_key_file " + path + ": no key in it (a 40-character Z85 line)");
}

StatusOr<CurveKeys> WriteNewCurveKeyFile(const std::string& path) {
  if (!CurveAvailable()) {
    return FailedPrecondition("this libzmq was built without CURVE (libsodium)");
  }
  char pub[41] = {0}, sec[41] = {0};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Internal(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return AlreadyExists(path + " exists: not overwritten");
    return IoError("cannot create " + path + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << "# LayerPS cluster key (CURVE secret key, Z85). Every node of the cluster uses this\n"
       << "# file (curve_key_file); keep it secret (mode 0600). Public key: " << pub << "\n"
       << sec << "\n";
  const std::string s = text.str();
  const bool ok = ::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    return IoError("cannot write " + path);
  }
  return CurveKeys{std::string(pub, 40), std::string(sec, 40)};
}

}  // namespace ps
