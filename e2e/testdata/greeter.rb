def greet(x) x end
