"""Client-quota admin for the tests: AlterClientQuotas / DescribeClientQuotas sent through
kafka-python's protocol classes and connection manager (neither confluent-kafka's nor
kafka-python's admin has a public client-quota API; Kafka's own tool is covered by the Java
`QuotasTest`)."""

from __future__ import annotations

from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaAdmin:
    def __init__(self, bootstrap: str):
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)

    def close(self) -> None:
        self.admin.close()

    def _send(self, request):
        async def go():
            return await self.admin._manager.send(request)

        return self.admin._manager.run(go)

    def alter(self, entries, validate_only: bool = False) -> list[tuple[int, str | None]]:
        """entries: [({type: name or None}, {key: value or None to remove})] -> [(code, message)]."""
        wire = []
        for entity, ops in entries:
            wire.append(
                (
                    [(t, n) for t, n in entity.items()],
                    [(k, 0.0 if v is None else float(v), v is None) for k, v in ops.items()],
                )
            )
        resp = self._send(AlterClientQuotasRequest(entries=wire, validate_only=validate_only))
        return [(e.error_code, e.error_message) for e in resp.entries]

    def describe(self, components, strict: bool = False):
        """components: [(type, match_type, match)] -> (code, message, {frozenset(entity): {key: value}})."""
        resp = self._send(DescribeClientQuotasRequest(components=components, strict=strict))
        found = {}
        for e in resp.entries or []:
            entity = frozenset((d.entity_type, d.entity_name) for d in e.entity)
            found[entity] = {v.key: v.value for v in e.values}
        return resp.error_code, resp.error_message, found
