"""gregor's own blocking Kafka client connection, for the parts that speak the protocol
themselves: the Spark source's executors and the schema registry's primary election."""
