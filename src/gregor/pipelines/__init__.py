"""Data pipelines on PySpark that read and write topics through the ``gregor`` connector.

retail (stock and prices), activity (page counts and user sessions), warehouse (a topic's
time range into date-partitioned Parquet) and monitoring (records received versus what
producers reported sending); :mod:`gregor.pipelines.generators` feeds them.
"""
