// Where a fine-tuning checkpoint stopped, read from its metadata alone: counts written by
// std::to_string and nothing else (no sign, space or trailing text, nothing past int64), and an
// example index inside the data.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "finetune/finetune_checks.h"

namespace mn {
namespace {

TEST(CheckpointPosition, CountsAndAnIndexInsideTheData) {
  std::map<std::string, std::string> meta = {
      {"global_step", "12"}, {"next_epoch", "3"}, {"next_index", "7"}};
  const finetune::CheckpointPosition p = finetune::checkpoint_position("ck", meta, 10);
  EXPECT_EQ(p.global_step, 12);
  EXPECT_EQ(p.next.epoch, 3);
  EXPECT_EQ(p.next.index, 7);
  for (const char* bad : {"-1", "+1", " 1", "1 ", "1x", "", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    auto m = meta;
    m["next_epoch"] = bad;
    try {
      finetune::checkpoint_position("ck", m, 10);
      ADD_FAILURE() << "accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("'next_epoch' is not a count"), std::string::npos)
          << e.what();
    }
  }
  meta["next_index"] = "10";
  EXPECT_THROW(finetune::checkpoint_position("ck", meta, 10), FormatError);
  meta.erase("global_step");
  EXPECT_THROW(finetune::checkpoint_position("ck", meta, 10), FormatError);
}

}  // namespace
}  // namespace mn
