// The core's communicator registry (core/src/communicator.cpp), without any plugin: a fake
// backend registered through Registrar::communicator by an in-process provider.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "../../../core/src/registry_internal.h"
#include "collectives_test_util.h"
#include "plugflow/error.h"
#include "plugflow/plugin.h"

using namespace plugflow;

namespace {

// Records the rendezvous it was made from; the operations are never called here.
class FakeCommunicator final : public Communicator {
 public:
  explicit FakeCommunicator(const Rendezvous& rv) : rv_(rv) {}
  int rank() const override { return rv_.rank; }
  int world_size() const override { return rv_.world_size; }
  std::string backend() const override { return "fake"; }
  void all_reduce(Tensor&, ReduceOp) override {}
  void broadcast(Tensor&, int) override {}
  void all_gather(std::vector<Tensor>&, const Tensor&) override {}
  void reduce_scatter(Tensor&, const Tensor&, ReduceOp) override {}
  void barrier() override {}
  void send(const Tensor&, int, int) override {}
  void recv(Tensor&, int, int) override {}
  Rendezvous rv_;
};

std::atomic<int> g_factory_calls{0};

// Registered once for the whole executable: the registry is process-wide and has no removal.
void register_fakes() {
  static bool done = [] {
    internal::register_provider("fake_provider", [](Registrar& reg) {
      reg.communicator("fake", DeviceType::CPU, [](const Rendezvous& rv) -> std::unique_ptr<Communicator> {
        ++g_factory_calls;
        return std::make_unique<FakeCommunicator>(rv);
      });
      reg.communicator("fake_throws_std", DeviceType::CPU, [](const Rendezvous&) -> std::unique_ptr<Communicator> {
        throw std::runtime_error("socket exploded");
      });
      reg.communicator("fake_times_out", DeviceType::CPU, [](const Rendezvous&) -> std::unique_ptr<Communicator> {
        throw TimeoutError("peer 1 never came");
      });
      reg.communicator("fake_null", DeviceType::CPU,
                       [](const Rendezvous&) -> std::unique_ptr<Communicator> { return nullptr; });
    });
    return true;
  }();
  (void)done;
}

Rendezvous rv(int rank, int world_size) {
  Rendezvous r;
  r.rank = rank;
  r.world_size = world_size;
  return r;
}

TEST(CommunicatorRegistry, CreatesRegisteredBackend) {
  register_fakes();
  auto comm = create_communicator("fake", rv(1, 3));
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->backend(), "fake");
  EXPECT_EQ(comm->rank(), 1);
  EXPECT_EQ(comm->world_size(), 3);
}

TEST(CommunicatorRegistry, ListsBackendsSorted) {
  register_fakes();
  const auto names = communicator_backends();
  EXPECT_EQ(names, (std::vector<std::string>{"fake", "fake_null", "fake_throws_std", "fake_times_out"}));
}

TEST(CommunicatorRegistry, UnknownBackendNamesTheRegisteredOnes) {
  register_fakes();
  PF_EXPECT_THROW_MSG(create_communicator("mpi", rv(0, 1)), PluginError, "no communicator backend 'mpi'");
  PF_EXPECT_THROW_MSG(create_communicator("mpi", rv(0, 1)), PluginError, "registered: fake, fake_null");
}

TEST(CommunicatorRegistry, DuplicateNameIsRefused) {
  register_fakes();
  auto register_other = [](const std::string& name, CommunicatorFactory factory) {
    internal::register_provider("other_provider",
                                [&](Registrar& reg) { reg.communicator(name, DeviceType::CPU, factory); });
  };
  PF_EXPECT_THROW_MSG(register_other("fake",
                                     [](const Rendezvous& r) -> std::unique_ptr<Communicator> {
                                       return std::make_unique<FakeCommunicator>(r);
                                     }),
                      PluginError, "plugin 'fake_provider' already registered");
  PF_EXPECT_THROW_MSG(register_other("", nullptr), PluginError, "empty name");
  PF_EXPECT_THROW_MSG(register_other("fake2", nullptr), PluginError, "without a factory");
}

TEST(CommunicatorRegistry, BadRendezvousIsRejectedBeforeTheFactoryRuns) {
  register_fakes();
  const int before = g_factory_calls.load();
  PF_EXPECT_THROW_MSG(create_communicator("fake", rv(2, 2)), ValueError, "rank 2 is out of range for world_size 2");
  PF_EXPECT_THROW_MSG(create_communicator("fake", rv(0, 0)), ValueError, "world_size must be >= 1");
  Rendezvous r = rv(0, 2);
  r.timeout = std::chrono::milliseconds(0);
  PF_EXPECT_THROW_MSG(create_communicator("fake", r), ValueError, "timeout must be positive");
  r = rv(0, 2);
  r.master_port = 70000;
  PF_EXPECT_THROW_MSG(create_communicator("fake", r), ValueError, "master_port 70000");
  r.store_path = "/tmp/somewhere";  // a file store needs no port
  EXPECT_NO_THROW(create_communicator("fake", r));
  EXPECT_EQ(g_factory_calls.load(), before + 1);
}

TEST(CommunicatorRegistry, FactoryErrorsNameTheBackend) {
  register_fakes();
  PF_EXPECT_THROW_MSG(create_communicator("fake_throws_std", rv(0, 1)), Error,
                      "communicator backend 'fake_throws_std' (plugin 'fake_provider') failed to start: socket exploded");
  // plugflow errors keep their type (a timeout stays a TimeoutError).
  PF_EXPECT_THROW_MSG(create_communicator("fake_times_out", rv(0, 1)), TimeoutError, "peer 1 never came");
  PF_EXPECT_THROW_MSG(create_communicator("fake_null", rv(0, 1)), PluginError, "returned no communicator");
}

}  // namespace
