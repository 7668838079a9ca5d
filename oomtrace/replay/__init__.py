"""What-if replay of recorded traffic on a paged KV pool under other admission settings."""
