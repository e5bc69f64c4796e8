"""actors.rollout.engine_gate.TokenGate: seeded sampling keeps the prompt tokens in flight within one engine step."""
import asyncio

from actors.rollout.engine_gate import TokenGate


def _peak(gate: TokenGate, costs: list) -> tuple:
    in_flight, peak, order = [0], [0], []

    async def request(i, cost):
        async with gate.hold(cost):
            in_flight[0] += cost
            peak[0] = max(peak[0], in_flight[0])
            order.append(i)
            await asyncio.sleep(0.01)
            in_flight[0] -= cost

    async def main():
        await asyncio.gather(*(request(i, c) for i, c in enumerate(costs)))
    asyncio.run(main())
    return peak[0], order


def test_requests_in_flight_never_exceed_the_budget_and_all_finish():
    peak, order = _peak(TokenGate(100), [40] * 10)
    assert peak == 80 and sorted(order) == list(range(10))


def test_a_request_over_the_budget_runs_alone_and_no_budget_means_no_limit():
    peak, order = _peak(TokenGate(100), [30, 250, 30])
    assert peak == 250 and sorted(order) == [0, 1, 2]
    peak, _ = _peak(TokenGate(None), [40] * 10)
    assert peak == 400
