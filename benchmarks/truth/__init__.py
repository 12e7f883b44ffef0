"""What a configuration gives, known without a launch: the cases, the oracle, and the truth measured on real
hardware."""
