"""gregor: an event-streaming platform that speaks Kafka's wire protocol."""
