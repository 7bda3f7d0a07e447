from symnet._src.app.demo import main as main
