"""The demo and the test harness, apart from the product: ``outbox-monitor demo`` (``run``),
its traffic (``simulate``), a throwaway PostgreSQL (``pgcluster``), the real n8n worker and
the local API its workflows call (``n8n``, ``downstream``), and a local Slack-compatible
server (``slack_sink``). The product never imports them, except the CLI's ``demo`` and
``simulate`` commands, lazily."""
