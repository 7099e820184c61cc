// The rendezvous stores' job identity (plugins/collectives/common/store.cpp, compiled in): who
// the TCP store admits, what a second master on a taken port does, and the file store's key
// names. Each "process" is a store connection of this process; the server cannot tell them
// from separate processes.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>

#include "collectives_test_util.h"
#include "plugflow/error.h"
#include "store.h"

using namespace plugflow;
using namespace pf_coll_test;
using plugflow::collectives::deadline_after;
using plugflow::collectives::open_store;
using plugflow::collectives::Store;

namespace {

Rendezvous job(int port, int rank, int world_size, const std::string& run_id = "") {
  Rendezvous rv = rendezvous(port, rank, world_size);
  rv.run_id = run_id;
  return rv;
}

std::unique_ptr<Store> join(const Rendezvous& rv) { return open_store(rv, deadline_after(5s)); }

// Seals every store of one job at once, as the ranks of a communicator do after their barrier.
void seal_all(std::vector<Store*> stores) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(stores.size());
  for (size_t i = 0; i < stores.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        stores[i]->seal(deadline_after(5s));
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < stores.size(); ++i) {
    if (errors[i]) ADD_FAILURE() << "store " << i << " could not seal: " << what_of(errors[i]);
  }
}

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(StoreAdmission, EachRankOfTheJobJoinsAndTheRendezvousSeals) {
  const int port = free_port();
  auto r0 = join(job(port, 0, 3, "run-7"));
  auto r1 = join(job(port, 1, 3, "run-7"));
  auto r2 = join(job(port, 2, 3, "run-7"));
  r1->set("k", bytes("v1"));
  r2->wait({"k"}, deadline_after(5s));
  EXPECT_EQ(r2->get("k"), bytes("v1"));
  seal_all({r0.get(), r1.get(), r2.get()});
}

TEST(StoreAdmission, RefusesAProcessOfAnotherWorldSize) {
  const int port = free_port();
  auto r0 = join(job(port, 0, 2));
  PF_EXPECT_THROW_MSG(join(job(port, 1, 3)), Error,
                      "it serves a job of world size 2, but this process has world size 3");
  // The job itself goes on: its own rank 1 joins and the rendezvous seals.
  auto r1 = join(job(port, 1, 2));
  seal_all({r0.get(), r1.get()});
}

TEST(StoreAdmission, RefusesAProcessOfAnotherRunId) {
  const int port = free_port();
  auto r0 = join(job(port, 0, 2, "job-a"));
  PF_EXPECT_THROW_MSG(join(job(port, 1, 2, "job-b")), Error,
                      "it serves the job with run id 'job-a', but this process has run id 'job-b'");
  PF_EXPECT_THROW_MSG(join(job(port, 1, 2)), Error, "but this process has no run id");
  auto r1 = join(job(port, 1, 2, "job-a"));
  seal_all({r0.get(), r1.get()});

  // A store of a job without a run id refuses a process that has one.
  const int port2 = free_port();
  auto s0 = join(job(port2, 0, 2));
  PF_EXPECT_THROW_MSG(join(job(port2, 1, 2, "job-b")), Error, "it serves the job with no run id");
}

TEST(StoreAdmission, ASecondClaimOfARankStopsTheRendezvousForEveryone) {
  const int port = free_port();
  auto r0 = join(job(port, 0, 3));
  auto r1 = join(job(port, 1, 3));
  // Nothing tells which of two processes claiming rank 1 belongs to this job.
  PF_EXPECT_THROW_MSG(join(job(port, 1, 3)), Error, "rank 1 was claimed by two processes");
  // Everyone of the job learns it at its next request, instead of waiting for the deadline.
  PF_EXPECT_THROW_MSG(r1->wait({"gloo/2"}, deadline_after(5s)), Error, "was stopped: rank 1 was claimed");
  PF_EXPECT_THROW_MSG(r0->seal(deadline_after(5s)), Error, "was stopped: rank 1 was claimed");
  PF_EXPECT_THROW_MSG(join(job(port, 2, 3)), Error, "rank 1 was claimed by two processes");
}

TEST(StoreAdmission, AfterTheSealLateProcessesAreRefusedAndTheJobGoesOn) {
  const int port = free_port();
  auto r0 = join(job(port, 0, 2));
  auto r1 = join(job(port, 1, 2));
  seal_all({r0.get(), r1.get()});
  PF_EXPECT_THROW_MSG(join(job(port, 1, 2)), Error, "completed its rendezvous (its rank 1 is pid");
  // The job's own connections are untouched.
  r1->set("after", bytes("x"));
  r0->wait({"after"}, deadline_after(5s));
  EXPECT_EQ(r0->get("after"), bytes("x"));
}

// ---- rank 0 of a second job on a taken port ------------------------------------------------

TEST(StorePort, ASecondMasterFailsNamingTheAddressAndLeavesAnotherJobAlone) {
  const int port = free_port();
  auto holder = join(job(port, 0, 2, "job-a"));
  const std::string address = "127.0.0.1:" + std::to_string(port);
  PF_EXPECT_THROW_MSG(join(job(port, 0, 2, "job-b")), Error, "MASTER_ADDR:MASTER_PORT " + address);
  PF_EXPECT_THROW_MSG(join(job(port, 0, 2, "job-b")), Error, "Address already in use");
  // The second master presented itself with its run id and was refused: job-a goes on.
  auto r1 = join(job(port, 1, 2, "job-a"));
  seal_all({holder.get(), r1.get()});
}

TEST(StorePort, ASecondMasterOfTheSameIdentityStopsAnOpenRendezvous) {
  const int port = free_port();
  auto holder = join(job(port, 0, 2));
  // Is this this job's rank 1, or the rank 1 of a job whose rank 0 is about to lose the port?
  auto rank1 = join(job(port, 1, 2));
  PF_EXPECT_THROW_MSG(join(job(port, 0, 2)), Error, "rank 0 was claimed by two processes");
  PF_EXPECT_THROW_MSG(holder->seal(deadline_after(5s)), Error, "was stopped: rank 0 was claimed");
  PF_EXPECT_THROW_MSG(rank1->seal(deadline_after(5s)), Error, "was stopped: rank 0 was claimed");
}

TEST(StorePort, ASecondMasterOfTheSameIdentityLeavesASealedJobAlone) {
  const int port = free_port();
  auto holder = join(job(port, 0, 2));
  auto rank1 = join(job(port, 1, 2));
  seal_all({holder.get(), rank1.get()});
  PF_EXPECT_THROW_MSG(join(job(port, 0, 2)), Error, "completed its rendezvous");
  rank1->set("still", bytes("here"));
  holder->wait({"still"}, deadline_after(5s));
}

// ---- file store ----------------------------------------------------------------------------

TEST(FileStoreIdentity, JobsOfAnotherWorldSizeOrRunIdDoNotSeeEachOthersKeys) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("plugflow_store_identity_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto file_job = [&](int world_size, const std::string& run_id) {
    Rendezvous rv = job(0, 1, world_size, run_id);
    rv.store_path = dir.string();
    return join(rv);
  };
  auto writer = file_job(2, "");
  writer->set("gloo/1", bytes("addr"));
  for (auto [world_size, run_id] : {std::pair{3, std::string()}, std::pair{2, std::string("job-b")}}) {
    auto other = file_job(world_size, run_id);
    PF_EXPECT_THROW_MSG(other->wait({"gloo/1"}, deadline_after(0ms)), TimeoutError, "'gloo/1'");
  }
  auto same = file_job(2, "");
  same->wait({"gloo/1"}, deadline_after(5s));
  EXPECT_EQ(same->get("gloo/1"), bytes("addr"));
  writer.reset();
  same.reset();
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "rendezvous keys left behind in " << dir;
  std::filesystem::remove_all(dir);
}

}  // namespace
