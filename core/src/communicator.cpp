// The communicator registry: backend name -> factory, filled from a provider's committed
// registration (Registrar::communicator stages it; registry.cpp commits).
#include "plugflow/communicator.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include "plugflow/error.h"
#include "registry_internal.h"

namespace plugflow {
namespace {

struct Entry {
  std::string provider;  // the plugin that registered it
  DeviceType device;     // whose tensors it communicates
  CommunicatorFactory factory;
  bool active = true;  // false while init has dropped its provider
};

struct Registry {
  std::shared_mutex mu;
  std::map<std::string, Entry> backends;  // ordered: listings come out sorted
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: plugins stay loaded for the process's life
  return *r;
}

std::string list(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::ostringstream os;
  for (size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << names[i];
  return os.str();
}

void validate(const std::string& backend, const Rendezvous& rv) {
  PF_CHECK_T(rv.world_size >= 1, ValueError, "communicator '", backend, "': world_size must be >= 1, got ",
             rv.world_size);
  PF_CHECK_T(rv.rank >= 0 && rv.rank < rv.world_size, ValueError, "communicator '", backend, "': rank ", rv.rank,
             " is out of range for world_size ", rv.world_size, " (valid: 0 to ", rv.world_size - 1, ")");
  PF_CHECK_T(rv.timeout.count() > 0, ValueError, "communicator '", backend, "': timeout must be positive, got ",
             rv.timeout.count(), " ms");
  constexpr size_t kMaxRunIdBytes = 256;  // it travels in every store handshake and error message
  PF_CHECK_T(rv.run_id.size() <= kMaxRunIdBytes, ValueError, "communicator '", backend, "': the run id has ",
             rv.run_id.size(), " bytes; at most ", kMaxRunIdBytes, " are allowed");
  if (rv.store_path.empty()) {
    PF_CHECK_T(!rv.master_addr.empty(), ValueError, "communicator '", backend,
               "': master_addr is empty (set MASTER_ADDR, or use a file store)");
    PF_CHECK_T(rv.master_port > 0 && rv.master_port < 65536, ValueError, "communicator '", backend,
               "': master_port ", rv.master_port, " is not a TCP port (1 to 65535)");
  }
}

}  // namespace

Communicator::~Communicator() = default;

void internal::check_communicators(const StagedRegistration& staged) {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  for (const auto& c : staged.communicators) {
    auto it = r.backends.find(c.backend);
    // Two plugins claiming one name is a configuration mistake; picking one silently would
    // make the result depend on load order.
    PF_CHECK_T(it == r.backends.end(), PluginError, "plugin '", staged.provider, "' registers communicator backend '",
               c.backend, "', which plugin '", it->second.provider, "' already registered; load only one of them");
  }
}

void internal::install_communicators(StagedRegistration& staged) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  for (auto& c : staged.communicators)
    r.backends.emplace(c.backend, Entry{staged.provider, c.device, std::move(c.factory)});
}

void internal::set_communicators_active(const std::string& provider, bool active) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  for (auto& [name, entry] : r.backends)
    if (entry.provider == provider) entry.active = active;
}

std::vector<internal::CommunicatorRegistration> internal::communicator_registrations() {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  std::vector<CommunicatorRegistration> out;
  for (const auto& [name, entry] : r.backends)
    out.push_back(CommunicatorRegistration{name, entry.device, entry.provider});
  return out;
}

std::unique_ptr<Communicator> create_communicator(const std::string& backend, const Rendezvous& rv) {
  CommunicatorFactory factory;
  std::string provider;
  {
    Registry& r = registry();
    std::shared_lock lock(r.mu);
    auto it = r.backends.find(backend);
    if (it != r.backends.end() && !it->second.active)
      PF_THROW(PluginError, "communicator backend '", backend, "' belongs to plugin '", it->second.provider,
               "', which is not part of the active config; list it in the config's plugins");
    if (it == r.backends.end()) {
      std::vector<std::string> names;
      for (const auto& [name, entry] : r.backends)
        if (entry.active) names.push_back(name);
      PF_THROW(PluginError, "no communicator backend '", backend, "' is registered (registered: ", list(names),
               "). Load the plugin that provides it: add it to the config's plugins list (e.g. plugins: [cpu, ",
               backend, "]) or call load_plugin");
    }
    factory = it->second.factory;
    provider = it->second.provider;
  }
  validate(backend, rv);
  // The factory rendezvouses with the peers and may block up to rv.timeout: not under the lock.
  std::unique_ptr<Communicator> comm;
  try {
    comm = factory(rv);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    PF_THROW(Error, "communicator backend '", backend, "' (plugin '", provider, "') failed to start: ", e.what());
  }
  PF_CHECK_T(comm != nullptr, PluginError, "communicator backend '", backend, "' (plugin '", provider,
             "') returned no communicator");
  return comm;
}

std::vector<std::string> communicator_backends() {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  std::vector<std::string> names;
  names.reserve(r.backends.size());
  for (const auto& [name, entry] : r.backends)
    if (entry.active) names.push_back(name);
  return names;
}

}  // namespace plugflow
