"""The operator's view of a job: its status (job_status), as Prometheus metrics (metrics), an HTML page and
JSON over HTTP (server), a terminal table (cli/status), and each recovery's timeline as a picture
(timeline_picture)."""
