from symnet._src.demo import main as main
