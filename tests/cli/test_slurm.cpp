// Reading Slurm's answers (cli/slurm.hpp): scontrol records, sacct lines, array task lists. The
// texts are what Slurm 22.05 prints (tests/integration/slurm.sh runs the real commands).
#include "cli/slurm.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace ktune::cli::slurm;

TEST_CASE("array task lists", "[cli][slurm]") {
  CHECK(expand_task_ids("1-4") == std::vector<int>{1, 2, 3, 4});
  CHECK(expand_task_ids("1,3-4%2") == std::vector<int>{1, 3, 4});
  CHECK(expand_task_ids("[2-6:2]") == std::vector<int>{2, 4, 6});
  CHECK(expand_task_ids("7") == std::vector<int>{7});
  CHECK(expand_task_ids("").empty());
  CHECK(task_list({4, 1, 2, 3}) == "1-4");
  CHECK(task_list({1, 3, 4, 7}) == "1,3-4,7");
  CHECK(task_list({2}) == "2");
}

TEST_CASE("scontrol -o show job of an array", "[cli][slurm]") {
  const auto tasks = parse_scontrol(
      "JobId=5 ArrayJobId=1 ArrayTaskId=3 JobName=job.sh UserId=root(0) JobState=FAILED "
      "Reason=NonZeroExitCode Dependency=(null) ExitCode=2:0 NodeList=localhost BatchHost=localhost\n"
      "JobId=1 ArrayJobId=1 ArrayTaskId=4-6%2 JobName=job.sh JobState=PENDING Reason=JobArrayTaskLimit "
      "ExitCode=0:0 NodeList=(null)\n"
      "JobId=9 JobName=wrap JobState=COMPLETED ExitCode=0:0 NodeList=localhost\n");
  REQUIRE(tasks.size() == 4);
  CHECK(tasks[0].task == 3);
  CHECK(tasks[0].job_id == 5);
  CHECK(tasks[0].array_job_id == 1);
  CHECK(tasks[0].state == "FAILED");
  CHECK(tasks[0].exit_code == "2:0");
  CHECK(tasks[0].node == "localhost");
  CHECK(tasks[0].reason == "NonZeroExitCode");
  CHECK(tasks[1].task == 4);
  CHECK(tasks[3].task == 6);
  CHECK(tasks[3].state == "PENDING");
  CHECK(tasks[3].node.empty());
  CHECK(is_active("PENDING"));
  CHECK(is_active("RUNNING"));
  CHECK_FALSE(is_active("CANCELLED"));
  CHECK_FALSE(is_active("TIMEOUT"));
}

TEST_CASE("sacct lines of an array", "[cli][slurm]") {
  const auto tasks = parse_sacct("12_1|13|COMPLETED|0:0|node1|None\n"
                                 "12_2|14|CANCELLED by 0|0:15|node2|None\n"
                                 "12_[3-4]|12|PENDING|0:0|None assigned|Dependency\n");
  REQUIRE(tasks.size() == 4);
  CHECK(tasks[0].array_job_id == 12);
  CHECK(tasks[0].job_id == 13);
  CHECK(tasks[1].state == "CANCELLED");
  CHECK(tasks[1].node == "node2");
  CHECK(tasks[2].task == 3);
  CHECK(tasks[3].task == 4);
  CHECK(tasks[3].node.empty());
  CHECK(tasks[3].reason == "Dependency");
}
