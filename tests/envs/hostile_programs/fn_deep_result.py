# Function mode: returns a list nested 990 levels deep; json.loads in the caller used to raise
# RecursionError out of run_function, env.step and the rollout. Expected: "runtime error".
def solve(x):
    a = [1]
    for _ in range(990):
        a = [a]
    return a
