"""The core: genomes, results, spaces, the mutator and evaluator protocols, the archive, errors."""
