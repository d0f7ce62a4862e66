"""SLO alerting: alerts.yml rules, one evaluator, and Slack notifications (issue 3)."""
