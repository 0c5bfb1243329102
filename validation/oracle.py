"""The oracle that openenv.yaml's validation block declares: proof that the top reward is reachable.

For each scenario it plays what a perfect agent would (the scenario's reference fix as one
``apply_patch``, then ``submit``) through the environment, in process or against a running server
(``--url``; the reference fix comes from the local copy of the same cache, since a server never
reveals it), and checks that the reward is within ``reward.oracle_tolerance`` of the declared maximum.

    python validation/oracle.py --split test --n 8
    python validation/oracle.py --url http://localhost:7860 --split external

Exit status 1 when any scenario falls short, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def declared() -> tuple[float, float]:
    """The declared maximum reward and the oracle's tolerance, from openenv.yaml."""
    import yaml

    reward = yaml.safe_load((ROOT / "openenv.yaml").read_text())["validation"]["reward"]
    return float(reward["range"][1]), float(reward["oracle_tolerance"])


def oracle_rewards(split: str, n: int, url: str | None = None, cache: str | None = None) -> dict[str, float | None]:
    """Each of the first ``n`` scenarios of ``split``: the reward of its reference fix."""
    from envcore.cache import ScenarioCache

    scenarios = ScenarioCache.open(cache)
    rewards: dict[str, float | None] = {}
    for scenario_id in scenarios.ids(split=split)[:n]:
        fix = scenarios.load(scenario_id).reference_fix
        actions = [{"tool": "apply_patch", "diff": fix}, {"tool": "submit"}]
        rewards[scenario_id] = play(scenario_id, split, actions, url=url, cache=scenarios)
    return rewards


def play(scenario_id: str, split: str, actions: list[dict], *, url: str | None = None, cache=None,
         seed: int = 0) -> float | None:
    """Play ``actions`` on the scenario (in process, or over ``/ws`` at ``url``) until the episode
    ends; its final reward (``None``: no reward, or the actions ran out before the end)."""
    if url:
        from envcore.env.client import A01Env

        with A01Env(base_url=url, message_timeout_s=300).sync() as client:
            client.reset(seed=seed, scenario=scenario_id, split=split)
            return _final_reward(lambda action: client.step(action).observation, actions)
    from envcore.env.environment import A01Environment, Runtime

    env = A01Environment(Runtime.from_environ(**({"sampler": _sampler(cache)} if cache is not None else {})))
    try:
        env.reset(seed=seed, scenario=scenario_id, split=split)
        return _final_reward(env.step, actions)
    finally:
        env.close()


def _final_reward(step, actions: list[dict]) -> float | None:
    for action in actions:
        observation = step(action)
        if observation.done:
            return observation.reward
    return None


def _sampler(cache):
    from envcore.env.sampler import CurriculumSampler

    return CurriculumSampler(cache)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="test", help="split to play (default test)")
    parser.add_argument("--n", type=int, default=8, help="scenarios, the split's first by id order (default 8)")
    parser.add_argument("--url", help="a running server (default: in process)")
    parser.add_argument("--cache", help="scenario cache (default: the newest shipped one)")
    args = parser.parse_args(argv)
    top, tolerance = declared()
    rewards = oracle_rewards(args.split, args.n, url=args.url, cache=args.cache)
    short = {sid: r for sid, r in rewards.items() if r is None or r < top - tolerance}
    for scenario_id, reward in rewards.items():
        print(f"{scenario_id}  {'no reward' if reward is None else f'{reward:+.3f}'}"
              f"{'  SHORT' if scenario_id in short else ''}")
    print(f"oracle: {len(rewards) - len(short)} of {len(rewards)} scenarios within {tolerance} of {top}")
    return 1 if short else 0


if __name__ == "__main__":
    raise SystemExit(main())
