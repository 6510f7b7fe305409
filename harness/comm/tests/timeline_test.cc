// Tests of the Chrome-trace timeline (harness/bench/timeline.h): valid JSON with
// spans in order, and the spans of a backend's Work merged across ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "harness/bench/timeline.h"
#include "harness/comm/communicator.h"
#include "harness/error.h"
#include "harness/testing/mpi_test.h"
#include "harness/comm/tests/backends_under_test.h"

namespace {

using ::testing::HasSubstr;
using dtl::Work;
using dtl::testing::Backend;
using dtl::testing::comm;
using dtl::testing::make_backend;

// ---------------------------------------------------------------------------
// The timeline
// ---------------------------------------------------------------------------

bool python_parses_json(const std::string& path, const std::string& check) {
  const std::string command = "python3 -c \"import json,sys; t=json.load(open(sys.argv[1])); " + check +
                              "\" " + path + " > /dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}

TEST(Timeline, WritesValidChromeTraceWithSpansInOrder) {
  dtl::Timeline timeline(comm().rank());
  timeline.add("compute", "backward \"layer\" 2\n", 10.002, 10.003, {{"bytes", "4 KiB"}});
  timeline.add("compute", "backward layer 3", 10.000, 10.001);
  timeline.add("comm", "bucket 0", 10.0015, 10.004);
  EXPECT_THROW(timeline.add("comm", "backwards", 2.0, 1.0), dtl::InvalidArgument);
  const std::string json = timeline.to_json();
  // Sorted by begin: layer 3 (ts 0), bucket 0 (ts 1500 us), layer 2 (ts 2000 us).
  const auto a = json.find("backward layer 3"), b = json.find("bucket 0"), d = json.find("backward \\\"layer\\\" 2\\n");
  EXPECT_NE(d, std::string::npos) << json;
  EXPECT_LT(a, b);
  EXPECT_LT(b, d);
  EXPECT_THAT(json, HasSubstr("\"ts\":1500.000,\"dur\":2500.000"));
  EXPECT_THAT(json, HasSubstr("\"name\":\"thread_name\",\"args\":{\"name\":\"comm\"}"));

  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("dtl_timeline_" + std::to_string(::getpid()) + ".json")).string();
  timeline.write(path);
  if (std::system("python3 -c 'import json' > /dev/null 2>&1") == 0) {
    EXPECT_TRUE(python_parses_json(path, "e=[x for x in t['traceEvents'] if x['ph']=='X']; "
                                         "assert [x['ts'] for x in e]==sorted(x['ts'] for x in e); assert len(e)==3"))
        << json;
  }
  std::filesystem::remove(path);
}

TEST(Timeline, RecordsWorkAndMergesRanks) {
  auto c = make_backend(Backend::kThread);
  dtl::Timeline timeline(comm().rank());
  std::vector<float> buf(1 << 16, 1.0f);
  Work w = c->allreduce(std::span<float>(buf));
  {
    dtl::Timeline::Scope scope(timeline, "compute", "busy");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_THROW(timeline.add_work("comm", w), dtl::InvalidArgument);  // not waited for: no end time yet
  w.wait();
  timeline.add_work("comm", w, "bucket 0");
  EXPECT_EQ(timeline.spans().size(), 2u);
  EXPECT_EQ(timeline.spans()[1].name, "bucket 0");
  EXPECT_EQ(timeline.spans()[1].args.at("description"), w.description());

  // Every rank gets the same path from rank 0.
  char path[512] = {};
  if (comm().rank() == 0) {
    const auto file = std::filesystem::temp_directory_path() / ("dtl_merged_" + std::to_string(::getpid()) + ".json");
    std::snprintf(path, sizeof path, "%s", file.c_str());
  }
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, comm());
  timeline.write_gathered(comm(), path);
  if (comm().rank() == 0) {
    if (std::system("python3 -c 'import json' > /dev/null 2>&1") == 0) {
      EXPECT_TRUE(python_parses_json(
          path, "assert len({x['pid'] for x in t['traceEvents'] if x['ph']=='X'})==" + std::to_string(comm().size()) +
                    "; assert min(x['ts'] for x in t['traceEvents'] if x['ph']=='X')==0"));
    }
    std::filesystem::remove(path);
  }
}


}  // namespace
