"""otlp: OpenTelemetry profiles (OTLP, profiles/v1development) export.

request.py encodes an ExportProfilesServiceRequest from flightrec profiles
(profiles.py); profiles_v1development.proto is the schema it follows, written
down from opentelemetry-proto v1.11.0 (wire-identical to v1.10.0)."""
