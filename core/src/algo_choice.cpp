// The process-wide list behind plugflow/algo_choice.h.
#include "plugflow/algo_choice.h"

#include <mutex>

namespace plugflow {
namespace {
struct Choices {
  std::mutex mutex;
  std::vector<AlgoChoice> list;  // few entries (one per distinct layer shape): a linear scan is fine
};
Choices& choices() {
  static Choices c;
  return c;
}
}  // namespace

void report_algo_choice(AlgoChoice choice) {
  auto& c = choices();
  std::lock_guard lock(c.mutex);
  for (AlgoChoice& old : c.list) {
    if (old.provider == choice.provider && old.op == choice.op && old.key == choice.key) {
      old = std::move(choice);
      return;
    }
  }
  c.list.push_back(std::move(choice));
}

std::vector<AlgoChoice> algo_choices() {
  auto& c = choices();
  std::lock_guard lock(c.mutex);
  return c.list;
}

}  // namespace plugflow
