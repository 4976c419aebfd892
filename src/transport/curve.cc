// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/curve.h"

#include "ps/cluster_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glog/logging.h>
#include <zmq.h>

#include <zmq.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

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
       << "# file (curve_key_file); keep it secret (mode 0600).\n"
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

StatusOr<std::unique_ptr<CurveAuthenticator>> CurveAuthenticator::Start(zmq::context_t* ctx,
                                                                       const CurveKeys& keys) {
  std::unique_ptr<CurveAuthenticator> a(new CurveAuthenticator());
  uint8_t raw[32];
  if (zmq_z85_decode(raw, keys.public_z85.c_str()) == nullptr) {
    return InvalidArgument("bad CURVE public key");
  }
  a->key_.assign(reinterpret_cast<const char*>(raw), 32);
  try {
    a->socket_ = std::make_unique<zmq::socket_t>(*ctx, zmq::socket_type::rep);
    a->socket_->set(zmq::sockopt::linger, 0);
    a->socket_->bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return Internal(std::string("cannot start the CURVE authenticator: ") + e.what());
  }
  CurveAuthenticator* self = a.get();
  a->thread_ = std::thread([self] { self->Loop(); });
  return a;
}

CurveAuthenticator::~CurveAuthenticator() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (socket_) socket_->close();
}

void CurveAuthenticator::Loop() {
  while (!stop_) {
    zmq::pollitem_t item{static_cast<void*>(*socket_), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      // ZAP 1.0: version, request id, domain, address, routing id, mechanism, credentials.
      std::vector<zmq::message_t> req;
      bool more = true;
      while (more && req.size() < 16) {
        zmq::message_t part;
        if (!socket_->recv(part, zmq::recv_flags::none)) break;
        more = part.more();
        req.push_back(std::move(part));
      }
      while (more) {  // more parts than ZAP has: drain them
        zmq::message_t part;
        if (!socket_->recv(part, zmq::recv_flags::none)) break;
        more = part.more();
      }
      if (req.size() < 2) continue;
      const bool ok = req.size() >= 7 && req[5].to_string() == "CURVE" && req[6].size() == 32 &&
                      std::memcmp(req[6].data(), key_.data(), 32) == 0;
      if (!ok) {
        ++refused_;
        LOG_EVERY_N(WARNING, 100) << "refused a CURVE handshake from "
                                  << (req.size() > 3 ? req[3].to_string() : std::string("?"))
                                  << ": the client does not hold the cluster's key";
      }
      const std::string reply[6] = {"1.0", req[1].to_string(), ok ? "200" : "400",
                                    ok ? "OK" : "not the cluster's key", "", ""};
      for (int i = 0; i < 6; ++i) {
        zmq::message_t m(reply[i].data(), reply[i].size());
        socket_->send(m, i < 5 ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      LOG_EVERY_N(WARNING, 100) << "CURVE authenticator: " << e.what();
    }
  }
}

Status WriteClusterKeyFile(const std::string& path) {
  if (path.empty()) return InvalidArgument("no key file path given");
  return WriteNewCurveKeyFile(path).status();
}

}  // namespace ps
