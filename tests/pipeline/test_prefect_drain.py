"""The drain of Prefect's log and events queues before a run ends (flows/prefect_server.py)."""


def test_the_drain_at_exit_keeps_prefects_still_processing_chatter_out_of_the_log(monkeypatch, caplog):
    # A stopped run drains Prefect's queues before its one `retbench:` line; on a loaded machine the
    # events worker warned "Still processing items" above it (CI, test_interrupted_runs).
    import logging

    from prefect._internal.concurrency.services import QueueService
    from prefect.events.worker import EventsWorker

    from retbench.flows.prefect_server import drain_prefect_queues

    def drain_all(timeout=None):
        logging.getLogger("EventsWorker").warning("Still processing items: 1 items remaining...")
        logging.getLogger("EventsWorker").warning("Service 'EventsWorker' queue is full (10 items), dropping item")

    monkeypatch.setattr(QueueService, "drain_all", staticmethod(drain_all))
    with caplog.at_level(logging.WARNING):
        drain_prefect_queues()
        logging.getLogger("EventsWorker").warning("Still processing items: after the drain")
    assert issubclass(EventsWorker, QueueService)
    assert [r.getMessage() for r in caplog.records] == [
        "Service 'EventsWorker' queue is full (10 items), dropping item", "Still processing items: after the drain"]
