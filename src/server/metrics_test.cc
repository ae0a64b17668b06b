#include "server/metrics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace pagoda {
namespace {

TEST(MetricsTest, HistogramIsCumulativeWithInf) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5.0);
  std::string out;
  h.Render("x_seconds", "model_name=\"m\"", &out);
  EXPECT_EQ(out,
            "x_seconds_bucket{model_name=\"m\",le=\"0.10000000000000001\"} 1\n"
            "x_seconds_bucket{model_name=\"m\",le=\"1\"} 2\n"
            "x_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 3\n"
            "x_seconds_sum{model_name=\"m\"} 5.5499999999999998\n"
            "x_seconds_count{model_name=\"m\"} 3\n");
}

TEST(MetricsTest, EveryBriefMetricHasHelpTypeAndALabelledSample) {
  ServerMetrics m("my \"model\"");
  m.ObserveTimeToFirstToken(0.2);
  EngineStats s;
  s.num_running = 2;
  s.kv_usage = 0.25;
  const std::string text = m.Render(s);
  const char* gauges[] = {"pagoda_kv_cache_usage_perc", "pagoda_num_requests_running",
                          "pagoda_num_requests_waiting"};
  const char* counters[] = {"pagoda_prefix_cache_queries_total", "pagoda_prefix_cache_hits_total",
                            "pagoda_num_preemptions_total", "pagoda_prompt_tokens_total",
                            "pagoda_generation_tokens_total"};
  const char* histograms[] = {"pagoda_time_to_first_token_seconds",
                              "pagoda_inter_token_latency_seconds",
                              "pagoda_e2e_request_latency_seconds"};
  for (const char* g : gauges)
    EXPECT_NE(text.find(std::string("# TYPE ") + g + " gauge\n"), std::string::npos) << g;
  for (const char* c : counters) {
    EXPECT_NE(text.find(std::string("# TYPE ") + c + " counter\n"), std::string::npos) << c;
    EXPECT_NE(text.find(std::string("# HELP ") + c + " "), std::string::npos) << c;
  }
  for (const char* h : histograms) {
    EXPECT_NE(text.find(std::string("# TYPE ") + h + " histogram\n"), std::string::npos) << h;
    EXPECT_NE(text.find(std::string(h) + "_bucket{model_name=\"my \\\"model\\\"\",le=\"+Inf\"}"),
              std::string::npos)
        << h;
  }
  EXPECT_NE(text.find("pagoda_num_requests_running{model_name=\"my \\\"model\\\"\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("pagoda_kv_cache_usage_perc{model_name=\"my \\\"model\\\"\"} 0.25\n"),
            std::string::npos);
  EXPECT_NE(
      text.find("pagoda_time_to_first_token_seconds_count{model_name=\"my \\\"model\\\"\"} 1\n"),
      std::string::npos);
  // Every line is a comment or `name{labels} value`.
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# ", 0) == 0) continue;
    EXPECT_NE(line.find("} "), std::string::npos) << line;
  }
}

TEST(MetricsTest, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace
}  // namespace pagoda
