"""Agents that play the A01 repair gym: the reply parser, baselines, LLM agents and rollouts."""
