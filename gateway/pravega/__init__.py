"""The Pravega adapter: Pravega's controller gRPC interface over Millrace's controller and stream layer,
so Pravega's own clients manage scopes and streams unchanged (``controller_service.py``)."""
