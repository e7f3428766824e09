#include "operator/operator_metrics.h"

#include <string>

#include <prometheus/text_serializer.h>

#include "gtest/gtest.h"

namespace paci::op {
namespace {

std::string Exposition(const OperatorMetrics& metrics) {
  return prometheus::TextSerializer().Serialize(metrics.registry()->Collect());
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(OperatorMetricsTest, EachTrainingJobHasAnInfoSeriesAndOneSeriesPerPhase) {
  OperatorMetrics metrics;
  metrics.SetTrainingJob({"research", "kjv", "Running", "kjv-0123abcd-g1"});
  metrics.SetTrainingJob({"default", "new", "Pending", ""});
  std::string text = Exposition(metrics);
  EXPECT_TRUE(Has(text, R"(paci_operator_trainingjob_info{namespace="research",training_job="kjv-0123abcd-g1",trainingjob="kjv"} 1)"))
      << text;
  EXPECT_TRUE(Has(text, R"(paci_operator_trainingjob_status_phase{namespace="research",phase="Running",trainingjob="kjv"} 1)"))
      << text;
  for (const std::string& phase : OperatorMetrics::Phases()) {
    if (phase == "Running") continue;
    EXPECT_TRUE(Has(text, R"(paci_operator_trainingjob_status_phase{namespace="research",phase=")" +
                              phase + R"(",trainingjob="kjv"} 0)"))
        << phase << "\n" << text;
  }
  EXPECT_TRUE(Has(text, R"(paci_operator_trainingjob_status_phase{namespace="default",phase="Pending",trainingjob="new"} 1)"))
      << text;
  // The operator does not mirror the coordinator's progress series.
  EXPECT_EQ(text.find("paci_operator_trainingjob_step"), std::string::npos) << text;
  EXPECT_EQ(text.find("tokens_per_second"), std::string::npos) << text;
}

TEST(OperatorMetricsTest, ANewCoordinatorJobReplacesTheInfoAndADeletedJobLeavesNoSeries) {
  OperatorMetrics metrics;
  metrics.SetTrainingJob({"research", "kjv", "Running", "kjv-0123abcd-g1"});
  metrics.SetTrainingJob({"research", "gone", "Failed", "gone-89abcdef-g1"});
  metrics.SetTrainingJob({"research", "kjv", "Failed", "kjv-0123abcd-g2"});
  metrics.RemoveTrainingJob("research", "gone");
  metrics.RemoveTrainingJob("research", "never-seen");  // nothing to remove
  const std::string text = Exposition(metrics);
  EXPECT_TRUE(Has(text, R"(paci_operator_trainingjob_info{namespace="research",training_job="kjv-0123abcd-g2",trainingjob="kjv"} 1)"))
      << text;
  EXPECT_EQ(text.find("kjv-0123abcd-g1"), std::string::npos) << text;
  EXPECT_EQ(text.find("gone"), std::string::npos) << text;
  EXPECT_TRUE(Has(text, R"(paci_operator_trainingjob_status_phase{namespace="research",phase="Failed",trainingjob="kjv"} 1)"))
      << text;
  EXPECT_TRUE(Has(text, R"(paci_operator_trainingjob_status_phase{namespace="research",phase="Running",trainingjob="kjv"} 0)"))
      << text;
  metrics.RemoveTrainingJob("research", "kjv");
  EXPECT_EQ(Exposition(metrics).find("trainingjob="), std::string::npos) << Exposition(metrics);
}

}  // namespace
}  // namespace paci::op
