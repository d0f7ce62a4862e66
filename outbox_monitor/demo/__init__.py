"""The demo and the test harness, apart from the product: ``outbox-monitor demo`` (``run``),
its traffic (``simulate``), a throwaway PostgreSQL (``pgcluster``), the real n8n worker and
the local API its workflows call (``n8n``, ``n8n_install``, ``n8n_credentials``,
``downstream``), and a local Slack-compatible server (``slack_sink``, ``slack_sink_http``,
``slack_sink_faults``, ``slack_limits``). The product never imports them, except the CLI's
``demo`` and ``simulate`` commands, lazily."""
