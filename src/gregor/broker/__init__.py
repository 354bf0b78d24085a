"""The asyncio server: connection -> frame -> router -> one handler module per API family."""
